package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ruleMaxFlows is the workers' --max-flows in TestJetStreamWorkersApplyTheStoreByOneRule.
const ruleMaxFlows = 20

// TestJetStreamWorkersApplyTheStoreByOneRule writes, from outside, the
// values an operator's `nats kv put` or a bug can leave in the bucket while
// nodes report to three workers, then restarts one worker: every get, from
// every worker, shows one state at one revision, and it is the rule's
// (PROTOCOL.md, "What a worker applies from a shared store"): a value that
// is not a FlowStateValue by serde_json's rules is no value (its node is
// absent); one naming more flows than the workers' --max-flows is applied
// (the rule depends on the value alone, never on a flag); an odd key is
// ignored; a deleted key is an absent node; a foreign valid value is
// applied.
func TestJetStreamWorkersApplyTheStoreByOneRule(t *testing.T) {
	t.Parallel()
	srv := startJetStreamServer(t)
	args := []string{"--max-flows", strconv.Itoa(ruleMaxFlows), "--metrics-addr", "127.0.0.1:0"}
	ws := startJSWorkers(t, srv.URL, 3, args...)
	c := newClient(t, ws[0])
	_, kv := jsKV(t, c.nc)

	// Nodes 900 to 906 report once, through the workers; their keys are
	// then overwritten from outside.
	reported := map[uint64]flowState{}
	for node := uint64(900); node <= 906; node++ {
		s := lastExec(map[uint32]int64{uint32(node): int64(node)})
		c.report(node, codecReport(node, s))
		reported[node] = s
	}
	tooMany := flowState{StateSize: map[uint32]uint64{}}
	for id := range uint32(ruleMaxFlows + 1) {
		tooMany.StateSize[5000+id] = 1
	}
	foreign := lastExec(map[uint32]int64{906: 1, 4242: 42})
	hostile := []struct {
		key   string
		value []byte // nil: delete
	}{
		{"__flow/state/node/900", []byte("not json at all")},
		{"__flow/state/node/901", []byte(`{"state_size":{"1":"12"},"last_exec_time_map":{}}`)},
		{"__flow/state/node/902", serdeJSON(tooMany)},
		{"__flow/state/node/903", bytes.Repeat([]byte("["), 1000_000)},
		{"__flow/state/node/0904", serdeJSON(lastExec(map[uint32]int64{4000: 1}))},
		{"__flow/state/node/905", nil},
		{"__flow/state/node/906", serdeJSON(foreign)},
	}

	r := startReporters(t, c, 20, 20*time.Millisecond)
	r.awaitAcks(200, 30*time.Second)
	for _, h := range hostile {
		var err error
		if h.value == nil {
			err = kv.Delete(t.Context(), h.key)
		} else {
			_, err = kv.Put(t.Context(), h.key, h.value)
		}
		require.NoError(t, err, "write %s from outside", h.key)
		r.awaitAcks(20, 30*time.Second)
	}
	require.Equal(t, 0, ws[1].Stop(), "the restarted worker's first life")
	again := launchWorker(t, nil, append([]string{"--nats-url", srv.URL, "--kv", "jetstream"}, args...)...)
	again.awaitReady(ws[0].ID, ws[1].ID, ws[2].ID)
	r.awaitAcks(200, 30*time.Second)
	r.stopAndWait()

	// The rule's state: every node's last acked report, node 904's (its
	// odd key is ignored), the value of node 902 past --max-flows and the
	// foreign value of node 906; nodes 900, 901, 903 and 905 are absent.
	last := map[uint64]flowState{902: tooMany, 904: reported[904], 906: foreign}
	r.mu.Lock()
	for node, s := range r.last {
		last[node] = s
	}
	r.mu.Unlock()
	want := aggregateOf(last)
	requireConverged(t, c, want, 45)
	stats := getStats(t, c.nc, []string{ws[0].ID, ws[2].ID, again.ID})
	for id, n := range stats {
		assert.NotZero(t, n, "worker %s served gets", id)
	}
	for _, w := range []*workerProc{ws[0], ws[2], again} {
		body := scrapeMetrics(t, w)
		for reason, n := range map[string]int{"invalid": 3, "key": 1} {
			assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^flowstate_store_refused_total\{reason="%s"\} %d$`, reason, n)), body,
				"worker %s counts what the rule refused", w.ID)
		}
	}
}

// scrapeMetrics returns a worker's /metrics (it runs with --metrics-addr).
func scrapeMetrics(t testing.TB, w *workerProc) string {
	t.Helper()
	addr := w.waitStderr(metricsListening)[1]
	resp, err := (&http.Client{Timeout: requestTimeout}).Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}
