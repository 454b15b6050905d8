package state_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// These tests hold the puts of the in-memory shared store in flight
// (HoldPuts), as a stalled link holds a worker's writes, to check the
// condition every node-key write carries: the key's last write as this
// worker knows it.

// TestReplicaWriteThatWaitedCannotLandAfterALaterReport: worker a's write
// of a node's report 2 waits in the link and times out (answered
// unavailable); report 3 goes through worker b and is acked; then the
// link delivers a's write. It must not be stored after report 3.
func TestReplicaWriteThatWaitedCannotLandAfterALaterReport(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	a := follow(t, mem, state.ReplicaOptions{ID: "a"})
	b := follow(t, mem, state.ReplicaOptions{ID: "b"})
	fmerge(t, a.mgr, 1, lastExecOf(1, 1))
	b.synced(t)

	mem.HoldPuts()
	held := submit(t, a.mgr, 1, lastExecOf(1, 2))
	mem.ExpireHeldPuts()
	_, err := outcome(t, held)
	require.ErrorIs(t, err, kv.ErrUnavailable, "timed out: not acked")
	fmerge(t, b.mgr, 1, lastExecOf(1, 3))
	mem.ReleasePuts(t.Context())

	for name, w := range map[string]*worker{"a": a, "b": b} {
		got, _ := w.synced(t)
		assert.Equal(t, map[flowstate.FlowID]int64{3: 1003}, got.LastExecTimeMap, "worker %s: report 2 was stored after report 3", name)
	}
}

// TestReplicaChainsTheWritesOfOneNode: a report of a node whose previous
// write from this worker is still in flight is sent once that one is
// answered, conditioned on its revision; reports of other nodes are not
// held up, and every report is acked in arrival order.
func TestReplicaChainsTheWritesOfOneNode(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{})
	mem.HoldPuts()
	first := submit(t, w.mgr, 1, lastExecOf(1, 1))
	second := submit(t, w.mgr, 1, lastExecOf(1, 2))
	other := submit(t, w.mgr, 2, lastExecOf(2, 1))
	assert.Equal(t, 2, mem.HeldPuts(), "the node's second write waits for the first's answer; the other node's is sent")
	mem.ReleasePuts(t.Context())

	var revs []uint64
	for i, p := range []*pending{first, second, other} {
		res, err := outcome(t, p)
		require.NoError(t, err, "report %d", i+1)
		revs = append(revs, res.Revision)
	}
	assert.Less(t, revs[0], revs[1], "the second write of the node is stored after the first")
	got, _ := w.synced(t)
	assert.Equal(t, map[flowstate.FlowID]int64{2: 1002, 1: 2001}, got.LastExecTimeMap)
	assert.Zero(t, w.mgr.Conflicts())
}

// TestReplicaChainedWriteAfterAnUnknownOutcome: the first write of a node
// times out (its outcome unknown) while the second waits for it; the
// second is sent on the condition the watch knows, so that whichever of
// the two the store takes first, the other is refused: the first,
// delivered late, does not land after the second.
func TestReplicaChainedWriteAfterAnUnknownOutcome(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{})
	mem.HoldPuts()
	first := submit(t, w.mgr, 1, lastExecOf(1, 1))
	second := submit(t, w.mgr, 1, lastExecOf(1, 2))
	mem.ExpireHeldPuts()
	_, err := outcome(t, first)
	require.ErrorIs(t, err, kv.ErrUnavailable)
	_, err = outcome(t, second)
	require.NoError(t, err, "sent once the first was answered, and stored")
	mem.ReleasePuts(t.Context())
	got, _ := w.synced(t)
	assert.Equal(t, map[flowstate.FlowID]int64{2: 1002}, got.LastExecTimeMap, "the first write, delivered late, was refused")
}

// TestReplicaOvertakenWriteIsSentAgainOnceItsWatchPassesTheWriteThatBeatIt:
// worker b sends a report of a node before its watch has applied a's
// write of the node: the store refuses it (nothing stored) and names a's
// write. b does not answer it yet: once its watch has passed a's write,
// it sends it again, conditioned on it, and acks it, after a's.
func TestReplicaOvertakenWriteIsSentAgainOnceItsWatchPassesTheWriteThatBeatIt(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	a := follow(t, mem, state.ReplicaOptions{ID: "a"})
	b := follow(t, mem, state.ReplicaOptions{ID: "b", ApplyTimeout: time.Minute})
	mem.StallWatches()
	fromA := submit(t, a.mgr, 1, lastExecOf(1, 1))
	fromB := submit(t, b.mgr, 1, lastExecOf(1, 2))
	// The store answers at once: a stored, b refused. b waits for its
	// watch, stalled: a LastRevision through the store passes b's put.
	_, err := mem.LastRevision(t.Context())
	require.NoError(t, err)
	assert.False(t, answered(fromB), "an overtaken report waits for the watch")
	mem.ResumeWatches()
	ra, err := outcome(t, fromA)
	require.NoError(t, err)
	rb, err := outcome(t, fromB)
	require.NoError(t, err, "sent again once the watch passed a's write, and stored")
	assert.Greater(t, rb.Revision, ra.Revision)
	assert.Zero(t, b.mgr.Conflicts(), "nothing answered as a conflict")
	got, _ := a.synced(t)
	assert.Equal(t, map[flowstate.FlowID]int64{2: 1002}, got.LastExecTimeMap, "b's report, the later, is the node's")
}

// TestReplicaOvertakenWriteIsAConflictWhenItsWatchDoesNotPassInTime: the
// same, but b's watch does not pass a's write within ApplyTimeout: b
// answers ErrConflict, which is unavailable (503), nothing of b's is
// stored, and b's next report of the node, once its watch has caught up,
// is acked.
func TestReplicaOvertakenWriteIsAConflictWhenItsWatchDoesNotPassInTime(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	a := follow(t, mem, state.ReplicaOptions{ID: "a"})
	b := follow(t, mem, state.ReplicaOptions{ID: "b", ApplyTimeout: 100 * time.Millisecond})
	mem.StallWatches()
	fromA := submit(t, a.mgr, 1, lastExecOf(1, 1))
	_, err := outcome(t, submit(t, b.mgr, 1, lastExecOf(1, 2)))
	require.ErrorIs(t, err, state.ErrConflict)
	require.ErrorIs(t, err, kv.ErrUnavailable, "answered 503: not stored")
	assert.Equal(t, uint64(1), b.mgr.Conflicts())
	mem.ResumeWatches()
	_, err = outcome(t, fromA)
	require.NoError(t, err)
	b.synced(t)
	fmerge(t, b.mgr, 1, lastExecOf(1, 3))
	got, _ := a.synced(t)
	assert.Equal(t, map[flowstate.FlowID]int64{3: 1003}, got.LastExecTimeMap)
}

// TestReplicaConditionsOnADeletionItLoaded: a node key deleted (evicted)
// before the worker started has a deletion as its last write; the watch
// delivers it with the store's content, and the node's next report is
// conditioned on it.
func TestReplicaConditionsOnADeletionItLoaded(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	_, err := mem.Put(t.Context(), flowstate.NodeKey(1), flowstate.AppendJSON(nil, lastExecOf(1, 1).Flows()))
	require.NoError(t, err)
	_, err = mem.Delete(t.Context(), flowstate.NodeKey(1))
	require.NoError(t, err)
	w := follow(t, mem, state.ReplicaOptions{})
	fmerge(t, w.mgr, 1, lastExecOf(1, 2))
	assert.Zero(t, w.mgr.Conflicts())
}

// TestReplicaJudgesAReportByALaterWriteOfItsNodeThanItsOwn: worker a's
// write of a node's report 1 is stored, but not answered (a write of
// another node, before it in a's queue, waits: its condition was refused
// and its resend is held); another worker then writes the node's report 3
// of the same process, and a's watch applies it. a's report 2 of that
// process is stale against report 3, the node's report now, not judged
// by a's own write: it is answered 409 and never stored.
func TestReplicaJudgesAReportByALaterWriteOfItsNodeThanItsOwn(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	a := follow(t, mem, state.ReplicaOptions{ID: "a", ApplyTimeout: time.Minute})
	blocker := queueBlocker(t, mem, a)
	first := submitReport(t, a.mgr, numbered(1, 100, 1, 1))
	stored, err := mem.Get(t.Context(), flowstate.NodeKey(1))
	require.NoError(t, err, "report 1 was stored")
	// Report 3 as another worker writes it, conditioned on report 1's write.
	third := numbered(1, 100, 3, 3)
	storeAsAnotherWorker(t, mem, third, stored.Revision)
	mem.HoldPuts()
	mem.ResumeWatches()
	require.NoError(t, a.mgr.Sync(t.Context()), "a's watch applied report 3")
	require.Eventually(t, func() bool { return mem.HeldPuts() == 1 }, followWait, 10*time.Millisecond, "the blocker is sent again, and held")
	assert.False(t, answered(first), "report 1 waits for the blocker's answer")

	second := submitReport(t, a.mgr, numbered(1, 100, 2, 2))
	mem.ReleasePuts(t.Context())
	_, err = outcome(t, blocker)
	require.NoError(t, err)
	_, err = outcome(t, first)
	require.NoError(t, err)
	_, err = outcome(t, second)
	require.ErrorIs(t, err, state.ErrStale, "report 2 is older than report 3, the node's report")
	got, _ := a.synced(t)
	assert.Equal(t, int64(3), got.LastExecTimeMap[1], "report 3 is the node's")
}

// TestReplicaJudgesAReportInANewEpochByTheNewEpochsWrite: worker a's write
// of a node's report 1 is stored but not answered (a write before it in
// a's queue waits for the store's answer) when the store is wiped: a new
// epoch. Another worker writes the node's report 3 of the same process in
// the new epoch, and a's watch applies it. a's report 2 is stale against
// report 3, the node's report in the new epoch, not judged by a's write of
// the ended epoch: it is answered 409 and never stored.
func TestReplicaJudgesAReportInANewEpochByTheNewEpochsWrite(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	a := follow(t, mem, state.ReplicaOptions{ID: "a", ApplyTimeout: time.Minute})
	blocker := queueBlocker(t, mem, a)
	first := submitReport(t, a.mgr, numbered(1, 100, 1, 1))
	mem.HoldPuts()
	mem.ResumeWatches()
	require.NoError(t, a.mgr.Sync(t.Context()), "a's watch applied report 1")
	require.Eventually(t, func() bool { return mem.HeldPuts() == 1 }, followWait, 10*time.Millisecond, "the blocker is sent again, and held")

	mem.StallWatches()
	require.NoError(t, mem.Clear(t.Context()))
	// Report 3 as another worker writes it in the new epoch.
	third := numbered(1, 100, 3, 3)
	storeAsAnotherWorker(t, mem, third, 0)
	mem.ResumeWatches()
	require.Eventually(t, func() bool { return a.mgr.Sync(t.Context()) == nil }, followWait, 10*time.Millisecond, "a's watch applied report 3 in the new epoch")
	assert.False(t, answered(first), "report 1 waits for the blocker's answer")

	second := submitReport(t, a.mgr, numbered(1, 100, 2, 2))
	mem.ReleasePuts(t.Context())
	_, err := outcome(t, blocker)
	require.Error(t, err, "its epoch ended")
	_, err = outcome(t, first)
	require.ErrorIs(t, err, state.ErrStoreCleared, "its epoch ended")
	_, err = outcome(t, second)
	require.ErrorIs(t, err, state.ErrStale, "report 2 is older than report 3, the node's report in the new epoch")
	got, _ := a.synced(t)
	assert.Equal(t, int64(3), got.LastExecTimeMap[1], "report 3 is the node's")
}

// TestReplicaAReportRefusedButStoredIsAckedAtItsCopy: the store stores a
// numbered report's write but answers that its condition failed (a server
// that still takes itself for the stream's leader answers by its stale
// view while the new leader stores the put). Once the watch has applied
// that write, the worker acknowledges the report at its revision: it does
// not send it again (a second copy) nor judge it stale against its own
// copy (409 for a report the state holds).
func TestReplicaAReportRefusedButStoredIsAckedAtItsCopy(t *testing.T) {
	mem, w, _ := followFirstReportOf(t, 100)

	mem.RefuseStoredWrites(flowstate.NodeKey(1), 1)
	second := submitReport(t, w.mgr, numbered(1, 100, 2, 2))
	res, err := outcome(t, second)
	require.NoError(t, err, "acknowledged: the state holds it")
	require.Len(t, mem.RefusedStoredAt(), 1, "its write was stored and answered as refused")
	assert.Equal(t, mem.RefusedStoredAt()[0], res.Revision, "acknowledged at its copy")
	e, err := mem.Get(t.Context(), flowstate.NodeKey(1))
	require.NoError(t, err)
	assert.Equal(t, res.Revision, e.Revision, "not sent again: its copy is the node's last write")
	got, _ := w.synced(t)
	assert.Equal(t, int64(2), got.LastExecTimeMap[1])
	assert.Zero(t, w.mgr.Conflicts())
}

// TestReplicaAnotherReportUnderTheSameNumbersIsNotTakenForItsCopy: another
// worker stored a report of the same node_epoch and seq but other flows
// (a flownode that sent its numbers twice) before this worker's write,
// which the store refused: that write is not this report's copy, and the
// report is stale against it (409), not acked at its revision.
func TestReplicaAnotherReportUnderTheSameNumbersIsNotTakenForItsCopy(t *testing.T) {
	mem, w, res := followFirstReportOf(t, 100)

	mem.StallWatches()
	other := numbered(1, 100, 2, 99)
	storeAsAnotherWorker(t, mem, other, res.Revision)
	second := submitReport(t, w.mgr, numbered(1, 100, 2, 2))
	mem.ResumeWatches()
	_, err := outcome(t, second)
	require.ErrorIs(t, err, state.ErrStale, "the node holds another report under the same numbers")
	got, _ := w.synced(t)
	assert.Equal(t, int64(99), got.LastExecTimeMap[1])
}

// followFirstReportOf starts a worker on a store of its own and has it ack
// node 1's report 1 of process epoch; it returns the store, the worker and
// the report's answer.
func followFirstReportOf(t *testing.T, epoch uint64) (*kv.SharedMemory, *worker, state.MergeResult) {
	t.Helper()
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{ApplyTimeout: time.Minute})
	res, err := outcome(t, submitReport(t, w.mgr, numbered(1, epoch, 1, 1)))
	require.NoError(t, err)
	return mem, w, res
}

// queueBlocker stalls mem's watches and queues at w a write of node 2
// that the store refuses (w's watch has not applied the node's write
// before it) and that waits, overtaken, at the head of w's queue: the
// writes queued after it are not answered before it is.
func queueBlocker(t *testing.T, mem *kv.SharedMemory, w *worker) *pending {
	t.Helper()
	mem.StallWatches()
	_, err := mem.Put(t.Context(), flowstate.NodeKey(2), flowstate.AppendJSON(nil, lastExecOf(2, 5).Flows()))
	require.NoError(t, err)
	return submit(t, w.mgr, 2, lastExecOf(2, 6))
}

// storeAsAnotherWorker writes rep to its node's key as another worker
// does, conditioned on the key's last write being cond.
func storeAsAnotherWorker(t *testing.T, mem *kv.SharedMemory, rep state.Report, cond uint64, msgAndArgs ...any) {
	t.Helper()
	key := flowstate.NodeKey(rep.Node)
	_, err := mem.PutIf(t.Context(), key, flowstate.AppendNodeJSON(nil, rep.Flows, rep.NodeEpoch, rep.HasNodeEpoch, rep.Health),
		kv.Condition{Key: key, Revision: cond})
	require.NoError(t, err, msgAndArgs...)
}

// TestReplicaWriteChainedBehindAnOvertakenOneRetiresWhatItDoes: worker a's
// write of node 1's first report of process 292 is refused (another
// worker wrote the node's report of process 291, which a's stalled watch
// has not applied) and waits, overtaken; a's next report of process 292
// is chained behind it. Once a's watch passes the write that beat it, the
// first is judged again and stored retiring 290 and 291; the second,
// stored after it, must retire them too, so that a late report of process
// 291 is stale for a and for a worker that reads the store afresh.
func TestReplicaWriteChainedBehindAnOvertakenOneRetiresWhatItDoes(t *testing.T) {
	mem, a, first := followFirstReportOf(t, 290)
	mem.StallWatches()
	other := numbered(1, 291, 1, 2)
	other.Health.RetiredEpochs = []uint64{290}
	storeAsAnotherWorker(t, mem, other, first.Revision)

	overtaken := submitReport(t, a.mgr, numbered(1, 292, 1, 3))
	_, err := mem.LastRevision(t.Context()) // passes a's put: refused, it waits for the watch
	require.NoError(t, err)
	chained := submitReport(t, a.mgr, numbered(1, 292, 2, 4))
	assert.False(t, answered(overtaken), "an overtaken report waits for the watch")
	mem.ResumeWatches()
	_, err = outcome(t, overtaken)
	require.NoError(t, err)
	_, err = outcome(t, chained)
	require.NoError(t, err)

	late := numbered(1, 291, 2, 5)
	_, err = outcome(t, submitReport(t, a.mgr, late))
	require.ErrorIs(t, err, state.ErrStale, "process 291 was retired by process 292's reports")
	fresh := follow(t, mem, state.ReplicaOptions{ID: "fresh"})
	_, err = outcome(t, submitReport(t, fresh.mgr, late))
	require.ErrorIs(t, err, state.ErrStale, "the node's stored report retires process 291")
	got, _ := a.synced(t)
	assert.Equal(t, int64(4), got.LastExecTimeMap[1], "process 292's second report is the node's")
}
