package e2e

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAckCarriesIncreasingRevisionAndEpoch sends reports as requests and
// requires each ack to be an empty body with a strictly greater revision in
// the same epoch, and a get after it to see the report at that version or
// later.
func TestAckCarriesIncreasingRevisionAndEpoch(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL)
	c := newClient(t, w)

	before := c.get()
	require.Zero(t, before.Revision, "revision before any report")

	steps := []mergeStep{
		{1, flowState{StateSize: map[uint32]uint64{1: 10}, LastExecTime: map[uint32]int64{1: 100}}},
		{2, flowState{StateSize: map[uint32]uint64{2: 20}}},
		{2, flowState{StateSize: map[uint32]uint64{2: 20}}}, // unchanged aggregate: still acked, new revision
		{1, flowState{StartTime: map[uint32]int64{1: 5}}},
		{3, flowState{}}, // a node with no flows
	}
	reported := map[uint64]flowState{}
	last := before.version
	for i, s := range steps {
		ack := c.report(s.node, encodings[i%len(encodings)].encode(t, s.node, s.report))
		require.Equal(t, before.Epoch, ack.Epoch, "epoch of ack %d", i)
		require.Greater(t, ack.Revision, last.Revision, "revision of ack %d", i)
		last = ack

		reported[s.node] = s.report
		got := c.requireState(aggregateOf(reported))
		require.Equal(t, ack.Epoch, got.Epoch, "epoch of the get after ack %d", i)
		require.GreaterOrEqual(t, got.Revision, ack.Revision, "revision of the get after ack %d", i)
	}
}

// aggregateOf is GreptimeDB's merge of every node's last report: per flow and
// field, the max over the nodes that report it.
func aggregateOf(reports map[uint64]flowState) flowState {
	agg := flowState{}.normalized()
	for _, r := range reports {
		for id, v := range r.StateSize {
			if old, ok := agg.StateSize[id]; !ok || v > old {
				agg.StateSize[id] = v
			}
		}
		for id, v := range r.LastExecTime {
			if old, ok := agg.LastExecTime[id]; !ok || v > old {
				agg.LastExecTime[id] = v
			}
		}
		for id, v := range r.StartTime {
			if old, ok := agg.StartTime[id]; !ok || v > old {
				agg.StartTime[id] = v
			}
		}
	}
	return agg
}
