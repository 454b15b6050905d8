package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// These tests give a worker three or more reports of one node while the
// first one's write awaits the store, so that the later ones wait chained
// behind it, and then make the first end in each way it can: judged stale
// once another worker stored a newer report of the node, stored with its
// answer late, overtaken, or left in flight by a stop. Every report must
// get its own answer, on its own merits: none may wait behind a write
// that nothing moves any more. The workers' ApplyTimeout is a minute, so
// an answer that comes is the outcome of the events, not of a deadline.

// chainOfThree submits node 1's reports seq 2, 3 and 5 of process 100 to
// w: the first is sent (the caller makes its put wait), the others chain
// behind it.
func chainOfThree(t *testing.T, w *worker) (first, second, third *pending) {
	t.Helper()
	first = submitReport(t, w.mgr, numbered(1, 100, 2, 2))
	second = submitReport(t, w.mgr, numbered(1, 100, 3, 3))
	third = submitReport(t, w.mgr, numbered(1, 100, 5, 5))
	return first, second, third
}

// requireStaleStaleAcked checks the answers of chainOfThree's reports once
// another worker stored seq 4: 2 and 3 are stale against it, 5 is stored
// after it, and every worker that reads the store holds 5.
func requireStaleStaleAcked(t *testing.T, mem *kv.SharedMemory, w *worker, first, second, third *pending) {
	t.Helper()
	_, err := outcome(t, first)
	require.ErrorIs(t, err, state.ErrStale, "seq 2 after seq 4")
	_, err = outcome(t, second)
	require.ErrorIs(t, err, state.ErrStale, "seq 3 after seq 4")
	res, err := outcome(t, third)
	require.NoError(t, err, "seq 5 is the node's newest report: it is stored, whatever came of the two before it")
	got, ver := w.synced(t)
	assert.Equal(t, int64(5), got.LastExecTimeMap[1])
	assert.GreaterOrEqual(t, ver.Revision, res.Revision)
	fresh := follow(t, mem, state.ReplicaOptions{ID: "fresh"})
	got, _ = fresh.synced(t)
	assert.Equal(t, int64(5), got.LastExecTimeMap[1], "the store holds seq 5")
	_, err = outcome(t, submitReport(t, w.mgr, numbered(1, 100, 6, 6)))
	require.NoError(t, err, "the worker still answers the node's reports")
}

// TestReplicaChainAnsweredWhenTheFirstIsRefusedAsStale: the first write's
// put waits in the link while another worker stores seq 4; once let
// through, the store refuses its condition, and once the watch has passed
// seq 4 it is stale, as is the second. The third must still be judged and
// sent.
func TestReplicaChainAnsweredWhenTheFirstIsRefusedAsStale(t *testing.T) {
	mem, a, firstRes := followFirstReportOf(t, 100)
	mem.HoldPuts()
	first, second, third := chainOfThree(t, a)
	storeAsAnotherWorker(t, mem, numbered(1, 100, 4, 4), firstRes.Revision)
	mem.ReleasePuts(t.Context())
	requireStaleStaleAcked(t, mem, a, first, second, third)
}

// TestReplicaChainAnsweredWhenTheFirstIsStoredAndAnsweredLate: the first
// write is stored, another worker stores seq 4 after it, and only then
// does the store's answer to the first come: the second is stale against
// seq 4, and the third must still be judged and sent.
func TestReplicaChainAnsweredWhenTheFirstIsStoredAndAnsweredLate(t *testing.T) {
	mem, a, _ := followFirstReportOf(t, 100)
	mem.HoldPuts()
	first, second, third := chainOfThree(t, a)
	mem.StoreHeldPuts(t.Context())
	last, err := mem.LastRevision(t.Context())
	require.NoError(t, err)
	storeAsAnotherWorker(t, mem, numbered(1, 100, 4, 4), last.Seq)
	a.synced(t) // a's watch applied seq 4 before the store's answer to the first write
	mem.ReleasePuts(t.Context())

	res, err := outcome(t, first)
	require.NoError(t, err, "seq 2 was stored, and the watch applied it")
	assert.Equal(t, last.Seq, res.Revision)
	_, err = outcome(t, second)
	require.ErrorIs(t, err, state.ErrStale, "seq 3 after seq 4")
	res, err = outcome(t, third)
	require.NoError(t, err, "seq 5 is the node's newest report")
	got, _ := a.synced(t)
	assert.Equal(t, int64(5), got.LastExecTimeMap[1])
	assert.Greater(t, res.Revision, last.Seq+1)
}

// TestReplicaChainAnsweredWhenTheFirstIsOvertaken: another worker stored
// seq 4 which this worker's stalled watch has not applied: the first
// write is refused and waits, overtaken, and the next two chain behind
// it. Once the watch resumes, the first and second are stale; the third
// must still be judged and sent.
func TestReplicaChainAnsweredWhenTheFirstIsOvertaken(t *testing.T) {
	mem, a, firstRes := followFirstReportOf(t, 100)
	mem.StallWatches()
	storeAsAnotherWorker(t, mem, numbered(1, 100, 4, 4), firstRes.Revision)
	first := submitReport(t, a.mgr, numbered(1, 100, 2, 2))
	_, err := mem.LastRevision(t.Context()) // passes a's put: refused, it waits for the watch
	require.NoError(t, err)
	second := submitReport(t, a.mgr, numbered(1, 100, 3, 3))
	third := submitReport(t, a.mgr, numbered(1, 100, 5, 5))
	assert.False(t, answered(first), "an overtaken report waits for the watch")
	mem.ResumeWatches()
	requireStaleStaleAcked(t, mem, a, first, second, third)
}

// TestReplicaStoppedAnswersEveryReport: the worker stops while the first
// write's put is in flight and two more of the node wait behind it: once
// Run has returned, every report has been answered, and the store's late
// answer to the put answers nothing twice.
func TestReplicaStoppedAnswersEveryReport(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{ApplyTimeout: time.Minute})
	mem.HoldPuts()
	first, second, third := chainOfThree(t, w)
	other := submit(t, w.mgr, 2, lastExecOf(2, 1))
	w.stop(t)
	for i, p := range []*pending{first, second, third, other} {
		require.True(t, answered(p), "report %d answered once Run has returned", i+1)
		require.ErrorIs(t, p.err, kv.ErrUnavailable, "report %d: not acknowledged", i+1)
	}
	mem.ReleasePuts(t.Context()) // a second answer would close a pending's channel twice: a panic
}

// TestReplicaChainOfAbandonedWritesMovesOn: the first two writes of a
// node time out while the first's put waits in the link (the worker
// answers them); the third, submitted later, is answered on its own
// merits once the first's put is answered.
func TestReplicaChainOfAbandonedWritesMovesOn(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{ApplyTimeout: time.Minute})
	mem.HoldPuts()
	first, second, third := chainOfThree(t, w)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	w.mgr.Drain(ctx) // gives up at once: every report answered
	for i, p := range []*pending{first, second, third} {
		require.True(t, answered(p), "report %d answered by Drain", i+1)
	}
	fourth := submitReport(t, w.mgr, numbered(1, 100, 7, 7))
	mem.ReleasePuts(t.Context())
	_, err := outcome(t, fourth)
	require.NoError(t, err, "the node's next report is stored once the writes before it are settled")
	got, _ := w.synced(t)
	assert.Equal(t, int64(7), got.LastExecTimeMap[1])
}

// blocked is a Completion that blocks until release is closed, as a reply
// on a connection that stalled does; entered is closed when it is called.
type blocked struct{ entered, release chan struct{} }

func (b *blocked) Complete(state.MergeResult, error) {
	close(b.entered)
	<-b.release
}

// TestReplicaWatchAppliesWhileAnAnswerBlocks: the answer to a report (its
// reply to the flownode) blocks, as a reply on a stalled connection does,
// once the watch has applied the report's write: the watch goes on
// applying the store's writes meanwhile, so that the worker's state, its
// gets and its barrier follow the store. The answer is not given on the
// watch's goroutine.
func TestReplicaWatchAppliesWhileAnAnswerBlocks(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	a := follow(t, mem, state.ReplicaOptions{ID: "a"})
	b := follow(t, mem, state.ReplicaOptions{ID: "b"})
	c := &blocked{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(c.release) }) // before the workers stop: cleanups run last first
	// The put is stored and answered before the watch delivers it: the
	// watch's event is the one that lets the report be answered.
	mem.StallWatches()
	require.NoError(t, a.mgr.Submit(t.Context(), state.Report{Node: 1, Flows: lastExecOf(1, 1).Flows()}, c))
	mem.ResumeWatches()
	select {
	case <-c.entered:
	case <-time.After(followWait):
		t.Fatal("the report was not answered")
	}
	res, err := b.mgr.Merge(t.Context(), state.Report{Node: 2, Flows: lastExecOf(2, 1).Flows()})
	require.NoError(t, err)
	require.NoError(t, a.mgr.Sync(t.Context()), "a's watch reaches the store's last write while a's answer blocks")
	v, err := a.mgr.Version(t.Context())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, v.Revision, res.Revision)
}
