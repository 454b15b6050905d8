package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/wait"
)

// The attacks of issue 11 by what a client sends (6, 8 and 9): large
// bodies, silent nodes and long subject tokens, unknown fields. Each is
// bounded in time and bytes.

// scrapeMetric returns the value of the sample named name (with its
// labels, if any) in the worker's /metrics, and whether it is exposed.
func scrapeMetric(t testing.TB, addr, name string) (float64, bool) {
	t.Helper()
	resp, err := (&http.Client{Timeout: requestTimeout}).Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f, true
		}
	}
	return 0, false
}

// TestAttackLargeBodiesAreCountedAndSurvived (attack 6): two clients send
// 8 MB bodies on the heartbeat subjects as fast as the server takes them
// (400 MB; 1.6 GB in the heavy variant). A legitimate report is acked
// afterwards, and if the server dropped the worker as a slow consumer, the
// drop is counted in flowstate_nats_slow_consumer_disconnects_total.
func TestAttackLargeBodiesAreCountedAndSurvived(t *testing.T) {
	t.Parallel()
	bodies := 50
	if heavy() {
		bodies = 200
	}
	w := embeddedWorker(t, "--metrics-addr", "127.0.0.1:0")
	addr := w.waitStderr(metricsListening)[1]
	c := newClient(t, w)
	legit := flowsReport(1, []uint32{1}, 1)
	c.report(1, legit)
	p := startProbe(t, w, 1, legit)
	big := make([]byte, 8_000_000)
	big[0] = 0xc1 // never valid msgpack
	var wg sync.WaitGroup
	for range 2 {
		nc := connect(t, w.URL)
		wg.Go(func() {
			for i := range bodies {
				if nc.Publish(w.Prefix+".heartbeat."+strconv.Itoa(i+2), big) != nil {
					return
				}
			}
			_ = nc.Flush()
		})
	}
	wg.Wait()
	p.awaitRounds(t, 2)
	// A dropped worker reconnects by itself (500 ms and jitter): a
	// flownode that finds no responder sends its next heartbeat a little
	// later, and is acked.
	// 100 ms between tries: the next heartbeat.
	wait.Until(t, stopTimeout, 100*time.Millisecond, func() (bool, string) {
		msg, err := c.nc.Request(c.heartbeatSubject(1), legit, requestTimeout)
		if err != nil {
			return false, fmt.Sprintf("a legitimate report after the attack: %v", err)
		}
		a := answer(msg)
		return a.Code == "", fmt.Sprintf("a legitimate report after the attack answered %s", a.Code)
	})
	slow, exposed := scrapeMetric(t, addr, "flowstate_nats_slow_consumer_disconnects_total")
	assert.True(t, exposed, "the worker counts the server's slow-consumer drops")
	closed, _ := scrapeMetric(t, addr, `flowstate_nats_disconnects_total{cause="server_closed"}`)
	t.Logf("server closed the connection %v times, %v of them as a slow consumer", closed, slow)
	if closed > 0 {
		assert.Positive(t, slow, "a server drop is counted as a slow consumer; stderr:\n%s", w.Stderr())
	}
	p.figures(t, "6 ("+strconv.Itoa(2*bodies)+" bodies of 8 MB)", w)
}

// evictedLine matches the eviction log line of today's worker (one per
// sweep, with a count) and of the older one (one per node).
var evictedLine = regexp.MustCompile(`msg="nodes? evicted: silent longer than the node TTL"(?: count=(\d+))?`)

// TestAttackEvictionOfManySilentNodesLogsOneLine (attack 8): 2,000 nodes
// report once and fall silent; their eviction is logged in a few lines
// with counts, not a line per node.
func TestAttackEvictionOfManySilentNodesLogsOneLine(t *testing.T) {
	t.Parallel()
	const nodes = 2_000
	w := embeddedWorker(t, "--node-ttl", "1s")
	c := newClient(t, w)
	publishAll(t, c.nc, w.Prefix, 1, func(node uint64) []byte { return flowsReport(node, []uint32{uint32(node)}, 1) }, nodes)
	c.report(nodes+1, flowsReport(nodes+1, []uint32{1}, 1))
	deadline := time.NewTimer(stopTimeout)
	defer deadline.Stop()
	for evicted := 0; evicted < nodes+1; {
		s, changed := w.p.stderr.snapshot()
		evicted = 0
		lines := evictedLine.FindAllStringSubmatch(s, -1)
		for _, m := range lines {
			n := 1
			if m[1] != "" {
				n, _ = strconv.Atoi(m[1])
			}
			evicted += n
		}
		if evicted >= nodes+1 {
			t.Logf("%d nodes evicted in %d log lines", evicted, len(lines))
			assert.LessOrEqual(t, len(lines), 5, "eviction log lines")
			break
		}
		select {
		case <-changed:
		case <-deadline.C:
			require.FailNow(t, "not every node evicted", "%d of %d within %v", evicted, nodes+1, stopTimeout)
		}
	}
}

// TestAttackLongSubjectTokenIsCut (attack 8): a report on a subject whose
// node token has 3,000 digits is rejected with a reason that quotes at most
// 64 bytes of it, and the log line does not carry it whole either.
func TestAttackLongSubjectTokenIsCut(t *testing.T) {
	t.Parallel()
	w := embeddedWorker(t)
	c := newClient(t, w)
	token := strings.Repeat("9", 3000)
	r := answer(c.request(w.Prefix+".heartbeat."+token, flowsReport(1, []uint32{1}, 1), nil))
	assert.Equal(t, "400", r.Code)
	assert.NotContains(t, r.Reason, token[:65], "the reason quotes at most 64 bytes of the token")
	assert.Less(t, len(r.Reason), 600, "reason length")
	line := w.waitStderr(rejectionLogged)
	logged := linesMatching(w.Stderr(), rejectionLogged)
	require.NotEmpty(t, logged, line)
	assert.NotContains(t, logged[0], token[:65], "the log line quotes at most 64 bytes of the token")
	c.report(1, flowsReport(1, []uint32{1}, 1))
}

// unknownFieldsReport is an 8 MiB report of node 1: node_id, then as many
// unknown fields (each nil) as fit, named by name(i).
func unknownFieldsReport(name func(i int) string) []byte {
	const size = 8<<20 - 64
	var fields []byte
	n := 0
	for ; ; n++ {
		k := name(n)
		if len(fields)+len(k)+2 > size {
			break
		}
		fields = append(mpStr(fields, k), 0xc0)
	}
	b := mpMapLen(nil, n+1)
	b = mpUint(mpStr(b, "node_id"), 1)
	return append(b, fields...)
}

// letters names field i in base 26, "a", "b", ..., "z", "ba", ...: distinct.
func letters(i int) string {
	var b []byte
	for {
		b = append(b, byte('a'+i%26))
		i /= 26
		if i == 0 {
			break
		}
	}
	return string(b)
}

// TestAttackMillionsOfUnknownFieldsAreRejected (attack 9): an 8 MiB
// report of 2.8 million one-letter unknown fields, and one of 1.3 million
// distinct ones, are each rejected (400, a reason of their own), and a
// legitimate node keeps being acked meanwhile.
func TestAttackMillionsOfUnknownFieldsAreRejected(t *testing.T) {
	t.Parallel()
	w := embeddedWorker(t)
	c := newClient(t, w)
	legit := flowsReport(1, []uint32{1}, 1)
	c.report(1, legit)
	p := startProbe(t, w, 2, flowsReport(2, []uint32{1}, 1))
	for _, tc := range []struct {
		outcome string
		name    func(int) string
	}{
		{"2.8M one-letter fields", func(int) string { return "x" }},
		{"1.3M distinct fields", letters},
	} {
		body := unknownFieldsReport(tc.name)
		start := time.Now()
		r := answer(c.request(c.heartbeatSubject(1), body, nil))
		t.Logf("%s: answered %q in %v", tc.outcome, r.Code, time.Since(start).Round(time.Millisecond))
		assert.Equal(t, "400", r.Code, tc.outcome)
		assert.Contains(t, r.Reason, "unknown", tc.outcome)
		p.awaitRounds(t, 2)
	}
	c.report(1, legit)
	ackFails, getFails := p.figures(t, "9 (8 MiB of unknown fields)", w)
	assert.Empty(t, ackFails, "legitimate reports during the attack")
	assert.Empty(t, getFails, "legitimate gets during the attack")
}
