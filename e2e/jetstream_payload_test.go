package e2e

import (
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/wait"
)

// TestJetStreamAggregateKeyIsNeverStale takes a --kv jetstream worker on a
// nats-server with its default 1 MB max payload to 25,000 flows, whose
// JSON does not fit one message: __flow/state is deleted rather than left
// at an older value, the worker says so (its gauge, its log), and
// `worker get --json` prints the whole state, GreptimeDB's exact bytes. Once
// the state shrinks back, the key holds exactly `worker get --json`'s bytes
// within 3 s.
func TestJetStreamAggregateKeyIsNeverStale(t *testing.T) {
	t.Parallel()
	const nodes, flowsPerNode = 250, 100
	srv := startJetStreamServer(t)
	w := startJSWorkers(t, srv.URL, 1, "--metrics-addr", "127.0.0.1:0")[0]
	w.waitStderr(regexp.MustCompile(`the aggregate's JSON can outgrow one NATS message.* flows=13107 max_payload=1048576`))
	c := newClient(t, w)
	_, kv := jsKV(t, c.nc)

	reports := map[uint64]flowState{}
	for node := range uint64(nodes) {
		s := flowState{StateSize: map[uint32]uint64{}, LastExecTime: map[uint32]int64{}, StartTime: map[uint32]int64{}}
		for i := range uint32(flowsPerNode) {
			id := uint32(node)*flowsPerNode + i + 1
			s.StateSize[id], s.LastExecTime[id], s.StartTime[id] = 1<<20+uint64(id), 1700000000000+int64(id), 1690000000000+int64(id)
		}
		c.report(node, codecReport(node, s))
		reports[node] = s
		if node == 0 {
			awaitKey(t, kv, jsStateKey, string(serdeJSON(s))) // written while it fits
		}
	}
	large := serdeJSON(aggregateOf(reports))
	require.Greater(t, len(large), 1<<20, "the aggregate's JSON does not fit the max payload")
	awaitKeyGone(t, kv, jsStateKey)
	w.waitStderr(regexp.MustCompile(`the aggregate's JSON does not fit one value of the store`))
	assert.Regexp(t, regexp.MustCompile(`(?m)^flowstate_aggregate_key_current 0$`), scrapeMetrics(t, w))
	assert.Equal(t, string(large)+"\n", workerGetJSON(t, srv.URL), "worker get --json: the whole state, of any size")

	// Back within one message: every node but 50 sends an empty report.
	for node := uint64(50); node < nodes; node++ {
		reports[node] = flowState{}
		c.report(node, codecReport(node, flowState{}))
	}
	want := workerGetJSON(t, srv.URL)
	require.Equal(t, string(serdeJSON(aggregateOf(reports)))+"\n", want)
	wait.Until(t, 3*time.Second, 20*time.Millisecond, func() (bool, string) {
		e, err := kv.Get(t.Context(), jsStateKey)
		if err != nil {
			return false, fmt.Sprintf("__flow/state: %v", err)
		}
		return string(e.Value())+"\n" == want, "__flow/state does not hold worker get --json's bytes"
	})
	assert.Regexp(t, regexp.MustCompile(`(?m)^flowstate_aggregate_key_current 1$`), scrapeMetrics(t, w))
}

// awaitKeyGone waits until the bucket's key is deleted.
func awaitKeyGone(t testing.TB, kv jetstream.KeyValue, key string) {
	t.Helper()
	wait.Until(t, messageTimeout, 20*time.Millisecond, func() (bool, string) {
		_, err := kv.Get(t.Context(), key)
		return errors.Is(err, jetstream.ErrKeyDeleted) || errors.Is(err, jetstream.ErrKeyNotFound), fmt.Sprintf("key %s still there (%v)", key, err)
	})
}

// workerGetJSON runs `worker get --json` against natsURL and returns what
// it prints.
func workerGetJSON(t testing.TB, natsURL string) string {
	t.Helper()
	p := startProcess(t, "worker get --json", bin.worker, nil, "get", "--json", "--nats-url", natsURL, "--timeout", "30s")
	code, ok := p.wait(messageTimeout)
	require.True(t, ok, "worker get --json did not exit")
	require.Equal(t, 0, code, "stderr: %s", p.stderr.String())
	return p.stdout.String()
}
