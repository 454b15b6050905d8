package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
)

// numberedReport is a report of node from process epoch numbered seq, with
// one flow executed at at.
func numberedReport(node, epoch, seq uint64, at int64) []byte {
	return codec.AppendReport(nil, &codec.Report{NodeID: node, NodeEpoch: epoch, HasNodeEpoch: true,
		Flows:  []flowstate.Flow{{ID: 1, Has: flowstate.HasLastExecTime, LastExecTime: at}},
		Health: flowstate.Health{HasSeq: true, Seq: seq}})
}

// TestAStaleReportIsAnswered409AndChangesNothing: on each backend, a
// numbered report not newer than the one held for its process is answered
// 409 with a reason naming both reports, and the state and its revision
// stay as they were; with JetStream, a worker that did not take the later
// report answers the same.
func TestAStaleReportIsAnswered409AndChangesNothing(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		c := newClient(t, startWorker(t, startServer(t).URL))
		staleIs409(t, c, c)
	})
	t.Run("jetstream", func(t *testing.T) {
		ws := startJSWorkers(t, startJetStreamServer(t).URL, 2)
		staleIs409(t, newClient(t, ws[0]), newClient(t, ws[1]))
	})
}

func staleIs409(t *testing.T, c, other *client) {
	t.Helper()
	acked := c.report(7, numberedReport(7, 1700000000000, 78, 78))
	before := other.getJSON()
	require.GreaterOrEqual(t, before.Revision, acked.Revision)
	for _, seq := range []uint64{76, 78} {
		r := other.reject(other.heartbeatSubject(7), numberedReport(7, 1700000000000, seq, int64(seq)))
		assert.Equal(t, "409", r.Code)
		assert.Contains(t, r.Reason, "node_epoch 1700000000000 seq 78", "the reason names the held report")
		assert.Contains(t, r.Reason, "seq "+map[uint64]string{76: "76", 78: "78"}[seq], "and the stale one")
	}
	after := other.getJSON()
	assert.Equal(t, before.version, after.version, "nothing changed, the revision included")
	assert.JSONEq(t, string(before.Body), string(after.Body))
	c.report(7, numberedReport(7, 1700000000000, 79, 79))
}
