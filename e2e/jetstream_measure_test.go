package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJetStreamGetAfterAckSeesTheReport acks reports on three workers and
// gets right after each ack: whichever worker answers, the get includes the
// report (the read barrier), so the cross-worker visibility bound of a get
// is zero.
func TestJetStreamGetAfterAckSeesTheReport(t *testing.T) {
	t.Parallel()
	srv := startJetStreamServer(t)
	ws := startJSWorkers(t, srv.URL, 3)
	c := newClient(t, ws[0])
	reported := map[uint64]flowState{}
	for i := range 150 {
		node := uint64(i % 15)
		s := nodeReport(node, i)
		ack := c.report(node, codecReport(node, s))
		reported[node] = s
		m := c.get()
		require.GreaterOrEqual(t, m.Revision, ack.Revision, "get %d after an ack", i)
		require.Equal(t, ack.Epoch, m.Epoch)
		if m.Revision == ack.Revision {
			require.Equal(t, canonicalMsgpack(aggregateOf(reported)), m.Body, "get %d: the state at the ack's revision", i)
		}
	}
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	for id, n := range getStats(t, c.nc, ids) {
		assert.NotZero(t, n, "worker %s served gets", id)
	}
}

// BenchmarkJetStreamUpdateAfterAck measures, per report, its ack by one of
// three workers sharing a JetStream bucket and the publisher's update that
// carries it on the state subject (--publish-interval 0). The rates of acked
// reports per backend are the load test's acked, js-r1 and js-r3 scenarios
// (go run ./e2e/loadtest).
func BenchmarkJetStreamUpdateAfterAck(b *testing.B) {
	srv := startJetStreamServer(b)
	ws := startJSWorkers(b, srv.URL, 3, "--publish-interval", "0")
	c := newClient(b, ws[0])
	u := c.subscribeUpdates()
	b.ResetTimer()
	for i := range b.N {
		node := uint64(i % 20)
		ack := c.report(node, codecReport(node, nodeReport(node, i)))
		for m := u.next(); m.Revision < ack.Revision; m = u.next() {
		}
	}
}
