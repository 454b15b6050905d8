package state_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// These tests submit several reports before waiting for any (Submit, then
// the outcome), as the worker's intake pipeline does, on the in-memory
// shared store and its hooks.

// pending is a submitted report's Completion.
type pending struct {
	res  state.MergeResult
	err  error
	done chan struct{}
}

func (p *pending) Complete(res state.MergeResult, err error) {
	p.res, p.err = res, err
	close(p.done)
}

// submit gives a report to r.
func submit(tb testing.TB, r *state.Replica, node uint64, v flowstate.FlowStateValue) *pending {
	tb.Helper()
	return submitReport(tb, r, state.Report{Node: node, Flows: v.Flows()})
}

// submitReport submits rep to r.
func submitReport(tb testing.TB, r *state.Replica, rep state.Report) *pending {
	tb.Helper()
	p := &pending{done: make(chan struct{})}
	require.NoError(tb, r.Submit(tb.Context(), rep, p), "submit report of node %d", rep.Node)
	return p
}

// outcome waits for a submitted report's answer.
func outcome(tb testing.TB, p *pending) (state.MergeResult, error) {
	tb.Helper()
	select {
	case <-p.done:
		return p.res, p.err
	case <-time.After(followWait):
		tb.Fatal("no answer")
		return state.MergeResult{}, nil
	}
}

// answered reports whether p has its answer.
func answered(p *pending) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func TestReplicaPipelineCompletesInOrderOnceApplied(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{})
	mem.StallWatches()
	var all []*pending
	for node := uint64(1); node <= 5; node++ {
		all = append(all, submit(t, w.mgr, node, lastExecOf(node, flowstate.FlowID(node))))
	}
	got, _ := fget(t, w.mgr)
	assert.Empty(t, got.LastExecTimeMap, "stored, but not applied while the watch is stalled")
	for i, p := range all {
		assert.False(t, answered(p), "report %d answered before the watch applied it", i+1)
	}
	mem.ResumeWatches()
	var last uint64
	for i, p := range all {
		res, err := outcome(t, p)
		require.NoError(t, err, "report %d", i+1)
		// Each is acked with its own write's revision, not the state's
		// revision when it completes (reports after it are applied by
		// then): no two reports share a revision.
		assert.Greater(t, res.Revision, last, "report %d is acked with its own revision", i+1)
		last = res.Revision
	}
	got, _ = fget(t, w.mgr)
	assert.Len(t, got.LastExecTimeMap, 5, "every completed report is served")
}

func TestReplicaPipelineFailureMidWindowCompletesNothingUnstored(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{})
	mem.StallWatches()
	first := submit(t, w.mgr, 1, lastExecOf(1, 1))
	mem.SetUnavailable(true)
	failed := submit(t, w.mgr, 2, lastExecOf(2, 2))
	mem.SetUnavailable(false)
	mem.LoseAcks(1)
	unknown := submit(t, w.mgr, 3, lastExecOf(3, 3))
	last := submit(t, w.mgr, 4, lastExecOf(4, 4))
	mem.ResumeWatches()

	_, err := outcome(t, first)
	require.NoError(t, err)
	_, err = outcome(t, failed)
	require.ErrorIs(t, err, kv.ErrUnavailable, "not stored: not completed")
	_, err = outcome(t, unknown)
	require.ErrorIs(t, err, kv.ErrUnavailable, "stored, but the store did not say so: not completed")
	_, err = outcome(t, last)
	require.NoError(t, err, "a failure before it does not fail a later write")

	got, _ := w.synced(t)
	assert.Equal(t, map[flowstate.FlowID]int64{1: 1001, 3: 3003, 4: 4004}, got.LastExecTimeMap,
		"the unstored report is not served; the one whose acknowledgement was lost is, from the store")
}

func TestReplicaPipelineLaterReportSupersedesFailedOne(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{})
	fmerge(t, w.mgr, 1, lastExecOf(1, 1))
	mem.SetUnavailable(true)
	failed := submit(t, w.mgr, 1, lastExecOf(1, 2))
	mem.SetUnavailable(false)
	later := submit(t, w.mgr, 1, lastExecOf(1, 3))
	_, err := outcome(t, failed)
	require.ErrorIs(t, err, kv.ErrUnavailable)
	_, err = outcome(t, later)
	require.NoError(t, err)
	got, _ := fget(t, w.mgr)
	assert.Equal(t, map[flowstate.FlowID]int64{3: 1003}, got.LastExecTimeMap, "the node's last stored report is its state")

	// The same bytes as a failed write of this worker, written by another
	// worker, are applied as theirs.
	other := follow(t, mem, state.ReplicaOptions{})
	mem.SetUnavailable(true)
	failed = submit(t, w.mgr, 2, lastExecOf(2, 2))
	mem.SetUnavailable(false)
	_, err = outcome(t, failed)
	require.ErrorIs(t, err, kv.ErrUnavailable)
	fmerge(t, other.mgr, 2, lastExecOf(2, 2))
	got, _ = w.synced(t)
	assert.Equal(t, map[flowstate.FlowID]int64{2: 2002, 3: 1003}, got.LastExecTimeMap)
}

func TestReplicaPipelineRefusesPastCapacityBeforeWriting(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{Limits: state.Limits{MaxNodes: 1}})
	fmerge(t, w.mgr, 1, lastExecOf(1, 1))
	_, err := outcome(t, submit(t, w.mgr, 2, lastExecOf(2, 2)))
	require.ErrorIs(t, err, state.ErrCapacity)
	_, err = mem.Get(t.Context(), flowstate.NodeKey(2))
	assert.ErrorIs(t, err, kv.ErrNotFound, "nothing written")
}

// unfencedStore refuses every aggregate write fenced on the lease, as a
// server that does not honour the fence header would.
type unfencedStore struct {
	*kv.SharedMemory
}

func (s unfencedStore) PutIf(ctx context.Context, key string, value []byte, cond kv.Condition) (kv.Revision, error) {
	if key == flowstate.StateKey {
		return kv.Revision{}, fmt.Errorf("refused: %w", kv.ErrRevisionMismatch)
	}
	return s.SharedMemory.PutIf(ctx, key, value, cond)
}

func TestReplicaFlushRefusedWhileHoldingTheLeaseIsLoggedOnceNotALostLease(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &logMu, w: &logs}, nil))
	w := follow(t, unfencedStore{kv.NewSharedMemory(kv.SharedMemoryOptions{})}, state.ReplicaOptions{Logger: log})
	require.Eventually(t, w.mgr.Publisher, followWait, time.Millisecond, "the only worker becomes the publisher")
	for node := uint64(1); node <= 3; node++ {
		fmerge(t, w.mgr, node, lastExecOf(node, flowstate.FlowID(node)))
		require.NoError(t, w.mgr.Flush(t.Context()), "not an error for the publisher: it goes on publishing")
		assert.True(t, w.mgr.Publisher(), "the lease is not lost")
	}
	logMu.Lock()
	defer logMu.Unlock()
	assert.Equal(t, 1, strings.Count(logs.String(), "refused the aggregate write"), "logged once: %s", logs.String())
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestReplicaPipelineCountsNewNodesInFlightAgainstMaxNodes(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{Limits: state.Limits{MaxNodes: 2}})
	mem.StallWatches()
	first := submit(t, w.mgr, 1, lastExecOf(1, 1))
	again := submit(t, w.mgr, 1, lastExecOf(1, 2)) // the same node: no new one
	second := submit(t, w.mgr, 2, lastExecOf(2, 3))
	refused := submit(t, w.mgr, 3, lastExecOf(3, 4))
	assert.False(t, answered(refused), "answered in its turn, after the reports before it")
	mem.ResumeWatches()
	for _, p := range []*pending{first, again, second} {
		_, err := outcome(t, p)
		require.NoError(t, err)
	}
	_, err := outcome(t, refused)
	require.ErrorIs(t, err, state.ErrCapacity, "two new nodes in flight make the limit")
	_, err = outcome(t, submit(t, w.mgr, 3, lastExecOf(3, 4)))
	require.ErrorIs(t, err, state.ErrCapacity, "two nodes applied make the limit")
	fmerge(t, w.mgr, 2, lastExecOf(2, 5))
}

// A window of reports, each within --max-total-flows by what the watch
// applied, must not pass it together: the flows of writes in flight count.
func TestReplicaPipelineCountsFlowsInFlightAgainstMaxFlows(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{Limits: state.Limits{MaxFlows: 4}})
	mem.StallWatches()
	first := submit(t, w.mgr, 1, lastExecOf(1, 1, 2, 3))
	refused := submit(t, w.mgr, 2, lastExecOf(2, 4, 5))
	second := submit(t, w.mgr, 2, lastExecOf(2, 4))
	mem.ResumeWatches()
	_, err := outcome(t, first)
	require.NoError(t, err)
	_, err = outcome(t, refused)
	var capErr *state.CapacityError
	require.ErrorAs(t, err, &capErr, "three flows in flight and two more pass 4")
	assert.Equal(t, state.LimitMaxTotalFlows, capErr.Limit)
	_, err = outcome(t, second)
	require.NoError(t, err)
	_, err = outcome(t, submit(t, w.mgr, 3, lastExecOf(3, 5)))
	require.ErrorIs(t, err, state.ErrCapacity, "four flows applied make the limit")
	fmerge(t, w.mgr, 1, lastExecOf(1, 1)) // frees two flows
	fmerge(t, w.mgr, 3, lastExecOf(3, 5, 6))
}
