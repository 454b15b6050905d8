package state

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"

	"github.com/flowstate-io/flowstate/flowstate"
)

// newTestReplica returns a Replica fed events by hand: no store is
// watched.
func newTestReplica(t *testing.T) *Replica {
	r, err := NewReplica(nil, ReplicaOptions{})
	require.NoError(t, err)
	return r
}

func put(node uint64, seq uint64, exact bool, lastExec int64) kv.Event {
	v := flowstate.FlowStateValue{LastExecTimeMap: map[flowstate.FlowID]int64{flowstate.FlowID(node): lastExec}}
	return kv.Event{Op: kv.OpPut, Key: flowstate.NodeKey(node), Value: flowstate.AppendJSON(nil, v.Flows()), Revision: kv.Revision{Epoch: "e1", Seq: seq}, Exact: exact}
}

func servedNow(t *testing.T, r *Replica) (map[flowstate.FlowID]int64, uint64) {
	t.Helper()
	s, err := r.Snapshot(context.Background(), nil)
	require.NoError(t, err)
	return s.Value().LastExecTimeMap, s.Revision
}

// TestReplicaServesOnlyExactStates feeds the replica a watch that falls
// behind and skips a replaced write: the state it served last stays served,
// at its revision, until the watch is exact again.
func TestReplicaServesOnlyExactStates(t *testing.T) {
	f := newTestReplica(t)
	f.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
	_, err := f.Snapshot(context.Background(), nil)
	assert.ErrorIs(t, err, kv.ErrUnavailable, "not served before the watch is synced")

	f.onEvent(put(1, 3, false, 10))
	f.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1", Seq: 3}, Exact: true})
	got, rev := servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 10}, got)
	assert.Equal(t, uint64(3), rev)

	f.onEvent(put(2, 4, true, 20))
	got, rev = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 10, 2: 20}, got)
	assert.Equal(t, uint64(4), rev)

	// Writes 5 and 6 were replaced before the watch read them: 7 is not an
	// exact state, so 4 stays served.
	f.onEvent(put(3, 7, false, 30))
	got, rev = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 10, 2: 20}, got)
	assert.Equal(t, uint64(4), rev)
	assert.False(t, f.servesLocked(7))

	// The watch caught up.
	f.onEvent(put(1, 9, true, 11))
	got, rev = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 11, 2: 20, 3: 30}, got)
	assert.Equal(t, uint64(9), rev)
	assert.True(t, f.servesLocked(9))

	// A deletion removes the node's flows.
	f.onEvent(kv.Event{Op: kv.OpDelete, Key: flowstate.NodeKey(2), Revision: kv.Revision{Epoch: "e1", Seq: 10}, Exact: true})
	got, rev = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 11, 3: 30}, got)
	assert.Equal(t, uint64(10), rev)

	// Keys that are not nodes' advance the watch, not the revision.
	f.onEvent(kv.Event{Op: kv.OpPut, Key: flowstate.StateKey, Value: []byte("{}"), Revision: kv.Revision{Epoch: "e1", Seq: 11}, Exact: true})
	_, rev = servedNow(t, f)
	assert.Equal(t, uint64(10), rev)
	assert.True(t, f.servesLocked(11))
}

// TestReplicaRereadKeepsServing restarts the watch in the same epoch: the
// last state stays served until the new pass is synced.
func TestReplicaRereadKeepsServing(t *testing.T) {
	f := newTestReplica(t)
	f.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
	f.onEvent(put(1, 3, false, 10))
	f.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1", Seq: 3}, Exact: true})

	f.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
	got, rev := servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 10}, got)
	assert.Equal(t, uint64(3), rev)
	f.onEvent(put(1, 5, false, 12))
	got, _ = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 10}, got, "still the last exact state")
	f.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1", Seq: 5}, Exact: true})
	got, rev = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 12}, got)
	assert.Equal(t, uint64(5), rev)

	// A pass that reads a stream behind what was served (revision 5) keeps
	// the last exact state served until it has caught up.
	f.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
	f.onEvent(put(1, 3, false, 10))
	f.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1", Seq: 3}, Exact: true})
	got, rev = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 12}, got, "not the state at revision 3 labelled 5")
	assert.Equal(t, uint64(5), rev)
	f.onEvent(put(1, 5, true, 12))
	f.onEvent(put(2, 6, true, 20))
	got, rev = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 12, 2: 20}, got, "caught up")
	assert.Equal(t, uint64(6), rev)

	// A new epoch starts over, empty at revision 0 once synced.
	f.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e2"}})
	_, err := f.Snapshot(context.Background(), nil)
	assert.ErrorIs(t, err, kv.ErrUnavailable)
	f.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e2"}, Exact: true})
	s, err := f.Snapshot(context.Background(), nil)
	require.NoError(t, err)
	assert.Empty(t, s.Flows)
	assert.Equal(t, flowstate.Version{Epoch: "e2"}, s.Version)
}

// TestReplicaAppliesWhatNoWorkerWritesByTheRule checks that a node key in
// another form than NodeKey's is ignored, and that a value that does not
// decode is no value: the node it names is absent, at the write's revision.
func TestReplicaAppliesWhatNoWorkerWritesByTheRule(t *testing.T) {
	f := newTestReplica(t)
	f.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
	f.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1"}, Exact: true})
	f.onEvent(put(1, 1, true, 10))
	f.onEvent(put(8, 2, true, 80))
	odd := put(7, 3, true, 70)
	odd.Key = flowstate.NodeKeyPrefix + "007"
	f.onEvent(odd)
	got, rev := servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 10, 8: 80}, got, "an odd key changes nothing")
	assert.Equal(t, uint64(2), rev, "nor the revision")

	f.onEvent(kv.Event{Op: kv.OpPut, Key: flowstate.NodeKey(8), Value: []byte("not json"), Revision: kv.Revision{Epoch: "e1", Seq: 4}, Exact: true})
	got, rev = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 10}, got, "node 8 is absent, as if its key were deleted")
	assert.Equal(t, uint64(4), rev)
	assert.Equal(t, map[string]uint64{RefusedKey: 1, RefusedInvalid: 1}, f.StoreRefusals())
}

// TestReplicaDeltaWhileCatchingUp: while the served state is held, a delta
// says that nothing changed since the last one; once the watch is exact, it
// carries everything since.
func TestReplicaDeltaWhileCatchingUp(t *testing.T) {
	f := newTestReplica(t)
	f.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
	f.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1"}, Exact: true})
	f.onEvent(put(1, 1, true, 10))
	d, err := f.Delta(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, uint64(1), d.Revision)

	f.onEvent(put(2, 2, true, 20))
	f.onEvent(put(3, 5, false, 30)) // held: 2 stays served
	d, err = f.Delta(context.Background(), d.Flows)
	require.NoError(t, err)
	assert.Equal(t, Delta{Version: flowstate.Version{Epoch: "e1", Revision: 1}, Base: 1, Flows: []flowstate.Flow{}}, d)

	f.onEvent(put(1, 6, true, 11))
	d, err = f.Delta(context.Background(), d.Flows)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), d.Base)
	assert.Equal(t, uint64(6), d.Revision)
	assert.Equal(t, []flowstate.FlowID{1, 2, 3}, []flowstate.FlowID{d.Flows[0].ID, d.Flows[1].ID, d.Flows[2].ID})
}

// TestReplicaLeavesOutWritesBeforeTheEpochBegan: a node write the store
// took after a purge but before the new epoch's key (a lower sequence
// number than OpReset's) belongs to the last epoch, not to this one.
func TestReplicaLeavesOutWritesBeforeTheEpochBegan(t *testing.T) {
	f := newTestReplica(t)
	f.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1", Seq: 5}})
	f.onEvent(put(1, 4, false, 10)) // stored before the epoch key
	f.onEvent(put(2, 6, false, 20))
	f.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1", Seq: 6}, Exact: true})
	got, rev := servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{2: 20}, got)
	assert.Equal(t, uint64(6), rev)
	f.mu.Lock()
	cond := f.condLocked(1)
	f.mu.Unlock()
	assert.Equal(t, uint64(4), cond, "a node write left out of the epoch is still its key's last write, which the store compares with")

	f.onEvent(put(1, 7, true, 30))
	got, rev = servedNow(t, f)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 30, 2: 20}, got, "the node's writes in this epoch count")
	assert.Equal(t, uint64(7), rev)
}

// answerOf is a Completion that keeps its answer.
type answerOf struct {
	res  MergeResult
	err  error
	done bool
}

func (a *answerOf) Complete(res MergeResult, err error) { a.res, a.err, a.done = res, err, true }

// threeFlows is a value of three flows.
func threeFlows() flowstate.FlowStateValue {
	return flowstate.FlowStateValue{LastExecTimeMap: map[flowstate.FlowID]int64{1: 1, 2: 2, 3: 3}}
}
