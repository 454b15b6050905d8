package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

func TestReplicaRefusesAReportPastItsLimits(t *testing.T) {
	store := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, store, state.ReplicaOptions{Limits: state.Limits{MaxNodes: 5, MaxFlows: 2}})
	fmerge(t, w.mgr, 1, lastExecOf(1, 1, 2))

	_, err := w.mgr.Merge(t.Context(), state.Report{Node: 2, Flows: lastExecOf(2, 3).Flows()})
	var ce *state.CapacityError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, state.LimitMaxTotalFlows, ce.Limit)
	_, err = store.Get(t.Context(), flowstate.NodeKey(2))
	assert.ErrorIs(t, err, kv.ErrNotFound, "nothing written")
	fmerge(t, w.mgr, 2, lastExecOf(2, 2)) // a shared flow adds nothing
}

// TestReplicaSignalsChangesAndTracksDeltas checks that a replica signals a
// change when another worker's report changes its state, and that the
// publisher's first delta makes clients resync, then carries the changes.
func TestReplicaSignalsChangesAndTracksDeltas(t *testing.T) {
	store := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	a := follow(t, store, state.ReplicaOptions{ID: "a"})
	changes := a.mgr.Changes()
	require.Eventually(t, a.mgr.Publisher, followWait, time.Millisecond, "the only replica becomes the publisher")
	select {
	case <-changes:
	case <-time.After(followWait):
		t.Fatal("no change signalled on becoming the publisher")
	}
	d, err := a.mgr.Delta(t.Context(), nil)
	require.NoError(t, err)
	assert.True(t, d.Resync, "a new publisher's first delta")

	b := follow(t, store, state.ReplicaOptions{ID: "b"})
	r := fmerge(t, b.mgr, 1, lastExecOf(1, 1, 2))
	select {
	case <-changes:
	case <-time.After(followWait):
		t.Fatal("no change signalled after another worker's report")
	}
	require.NoError(t, a.mgr.Sync(t.Context()))
	d2, err := a.mgr.Delta(t.Context(), d.Flows)
	require.NoError(t, err)
	assert.False(t, d2.Resync)
	assert.Equal(t, d.Revision, d2.Base)
	assert.Equal(t, r.Version, d2.Version)
	assert.Equal(t, lastExecOf(1, 1, 2).Flows(), d2.Flows)

	fmerge(t, b.mgr, 1, lastExecOf(1, 2))
	require.NoError(t, a.mgr.Sync(t.Context()))
	d3, err := a.mgr.Delta(t.Context(), d2.Flows)
	require.NoError(t, err)
	assert.Equal(t, []flowstate.Flow{{ID: 1}}, d3.Flows, "flow 1 left; flow 2 did not change")
	assert.Equal(t, r.Revision, d3.Base)
}

// TestReplicaRunEndsWithItsContext starts a replica on a store whose watch
// is held back: it never serves, and ends, leaving nothing behind, when its
// context does.
func TestReplicaRunEndsWithItsContext(t *testing.T) {
	store := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	store.StallWatches()
	r, err := state.NewReplica(store, state.ReplicaOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	short, stop := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer stop()
	assert.Error(t, r.WaitLoaded(short), "not loaded while the watch is held back")
	assert.False(t, r.Loaded())
	_, err = r.Merge(t.Context(), state.Report{Node: 1, Flows: nil})
	assert.ErrorIs(t, err, kv.ErrUnavailable, "refused at once, nothing written")
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(followWait):
		t.Fatal("Run did not end with its context")
	}
	assert.Error(t, r.Run(t.Context()), "Run runs once")
}
