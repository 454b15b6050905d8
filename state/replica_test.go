package state_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	fsclock "github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/internal/wait"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/kv/jetstream"
	"github.com/flowstate-io/flowstate/state"
)

// These tests run Replicas, as workers do, on each shared store: the
// in-memory one (one store that every worker shares, no server) and a
// bucket of an embedded NATS server with JetStream (each worker on its own
// connection).

const followWait = 10 * time.Second

func startJetStream(tb testing.TB) *server.Server {
	tb.Helper()
	return natstest.Start(tb, &server.Options{JetStream: true})
}

var followBuckets atomic.Int64

func newBucket() string { return fmt.Sprintf("follow_%d", followBuckets.Add(1)) }

// worker is a running Replica on its own connection and store.
type worker struct {
	mgr     *state.Replica
	store   state.Store
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// eachBackend runs test on each shared store; open returns a new handle
// on one fresh store.
func eachBackend(t *testing.T, test func(t *testing.T, open func() state.Store)) {
	t.Run("memory", func(t *testing.T) {
		mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
		test(t, func() state.Store { return mem })
	})
	t.Run("jetstream", func(t *testing.T) {
		srv := startJetStream(t)
		bucket := newBucket()
		test(t, func() state.Store {
			nc, err := nats.Connect(srv.ClientURL())
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), followWait)
			defer cancel()
			store, err := jetstream.Open(ctx, nc, jetstream.Config{Bucket: bucket, CheckInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			t.Cleanup(func() {
				store.Close()
				nc.Close()
			})
			return store
		})
	})
}

// follow runs a Replica of store until it is loaded; Cleanup stops it
// (before the store is closed: cleanups run last first).
func follow(tb testing.TB, store state.Store, opts state.ReplicaOptions) *worker {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), followWait)
	defer cancel()
	r, err := state.NewReplica(store, opts)
	require.NoError(tb, err)
	runCtx, stop := context.WithCancel(context.Background())
	w := &worker{mgr: r, store: store, cancel: stop, done: make(chan error, 1)}
	go func() { w.done <- r.Run(runCtx) }()
	tb.Cleanup(func() { w.stop(tb) })
	require.NoError(tb, r.WaitLoaded(ctx))
	return w
}

// stop ends the replica's Run and waits for it.
func (w *worker) stop(tb testing.TB) {
	if w.stopped {
		return
	}
	w.stopped = true
	w.cancel()
	select {
	case err := <-w.done:
		assert.NoError(tb, err)
	case <-time.After(followWait):
		tb.Error("Run did not return")
	}
	assert.False(tb, w.mgr.Loaded(), "a replica that stopped serves nothing")
}

// wipe purges store, as an operator can: both shared stores of the tests
// can be wiped.
func wipe(tb testing.TB, store state.Store) {
	tb.Helper()
	w, ok := store.(interface{ Clear(context.Context) error })
	require.True(tb, ok, "%T cannot be wiped", store)
	require.NoError(tb, w.Clear(tb.Context()))
}

// fmerge applies a report and fails the test on error.
func fmerge(tb testing.TB, m *state.Replica, nodeID uint64, v flowstate.FlowStateValue) state.MergeResult {
	tb.Helper()
	res, err := m.Merge(tb.Context(), state.Report{Node: nodeID, Flows: v.Flows()})
	require.NoError(tb, err, "merge report of node %d", nodeID)
	return res
}

// fget returns the aggregate and its version, without a read barrier.
func fget(tb testing.TB, m *state.Replica) (flowstate.FlowStateValue, flowstate.Version) {
	tb.Helper()
	s, err := m.Snapshot(tb.Context(), nil)
	require.NoError(tb, err)
	return s.Value(), s.Version
}

// synced returns the state after a read barrier.
func (w *worker) synced(tb testing.TB) (flowstate.FlowStateValue, flowstate.Version) {
	tb.Helper()
	require.NoError(tb, w.mgr.Sync(tb.Context()))
	assert.True(tb, w.mgr.Loaded(), "loaded once a read barrier passed")
	return fget(tb, w.mgr)
}

// emptyValue is a value whose maps are empty, not nil.
func emptyValue() flowstate.FlowStateValue {
	return flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{},
		LastExecTimeMap: map[flowstate.FlowID]int64{},
		StartTimeMap:    map[flowstate.FlowID]int64{},
	}
}

// lastExecOf is a report of node with the given flows, whose last execution
// times say which node reported them.
func lastExecOf(node uint64, ids ...flowstate.FlowID) flowstate.FlowStateValue {
	v := emptyValue()
	for _, id := range ids {
		v.LastExecTimeMap[id] = int64(node)*1000 + int64(id)
	}
	return v
}

func TestReplicasShareOneState(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		a := follow(t, open(), state.ReplicaOptions{ID: "a"})
		b := follow(t, open(), state.ReplicaOptions{ID: "b"})

		_, v0 := fget(t, a.mgr)
		assert.Zero(t, v0.Revision, "nothing merged yet")
		_, vb0 := fget(t, b.mgr)
		assert.Equal(t, v0, vb0, "one epoch")

		r1 := fmerge(t, a.mgr, 1, lastExecOf(1, 10, 11))
		assert.True(t, r1.Changed)
		assert.Equal(t, v0.Epoch, r1.Epoch)
		// Visible at once on the worker that acked it.
		va, vera := fget(t, a.mgr)
		assert.True(t, va.Equal(lastExecOf(1, 10, 11)))
		assert.Equal(t, r1.Version, vera)

		r2 := fmerge(t, b.mgr, 2, lastExecOf(2, 11, 12))
		assert.Greater(t, r2.Revision, r1.Revision)
		want := emptyValue()
		want.LastExecTimeMap = map[flowstate.FlowID]int64{10: 1010, 11: 2011, 12: 2012}
		for name, w := range map[string]*worker{"a": a, "b": b} {
			v, ver := w.synced(t)
			assert.True(t, v.Equal(want), "%s: %v", name, v)
			assert.Equal(t, r2.Version, ver, name)
		}

		// A report that changes nothing is acked, at a new revision.
		r3 := fmerge(t, a.mgr, 2, lastExecOf(2, 11, 12))
		assert.False(t, r3.Changed)
		assert.Greater(t, r3.Revision, r2.Revision)

		// An empty report removes the node's flows.
		fmerge(t, b.mgr, 1, flowstate.FlowStateValue{})
		v, _ := a.synced(t)
		assert.True(t, v.Equal(lastExecOf(2, 11, 12)), "%v", v)
	})
}

// TestReplicasMergingConcurrentlyLoseNothing has three managers
// merge reports of 60 nodes at once; every one ends with the exact
// aggregate of each node's last acked report, at the same version.
func TestReplicasMergingConcurrentlyLoseNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		ws := []*worker{
			follow(t, open(), state.ReplicaOptions{}),
			follow(t, open(), state.ReplicaOptions{}),
			follow(t, open(), state.ReplicaOptions{}),
		}
		const nodes, rounds = 60, 8
		last := make([]flowstate.FlowStateValue, nodes)
		var wg sync.WaitGroup
		for node := range nodes {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(node), 1))
				for r := range rounds {
					v := emptyValue()
					for range rng.IntN(4) {
						id := flowstate.FlowID(rng.IntN(20))
						v.LastExecTimeMap[id] = int64(r*1000 + node)
					}
					// As a flownode does, send the report again until it is
					// acked (an overloaded store may answer unavailable).
					var err error
					for try := range 20 {
						w := ws[(node+r+try)%len(ws)]
						if _, err = w.mgr.Merge(context.Background(), state.Report{Node: uint64(node), Flows: v.Flows()}); !errors.Is(err, kv.ErrUnavailable) {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
					if !assert.NoError(t, err) {
						return
					}
					last[node] = v
				}
			})
		}
		wg.Wait()
		want := emptyValue()
		for _, v := range last {
			for id, ts := range v.LastExecTimeMap {
				want.LastExecTimeMap[id] = max(want.LastExecTimeMap[id], ts)
			}
		}
		var versions []flowstate.Version
		for i, w := range ws {
			v, ver := w.synced(t)
			assert.True(t, v.Equal(want), "worker %d: got %v, want %v", i, v, want)
			versions = append(versions, ver)
		}
		assert.Equal(t, versions[0], versions[1])
		assert.Equal(t, versions[0], versions[2])
	})
}

// TestReplicasElectOnePublisher checks that one manager at a time
// writes the aggregate key, fenced by its lease, and that another takes
// over at once when it stops, or after the lease expires when it dies.
func TestReplicasElectOnePublisher(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		opts := state.ReplicaOptions{LeaseTTL: 600 * time.Millisecond}
		ws := []*worker{follow(t, open(), opts), follow(t, open(), opts), follow(t, open(), opts)}
		publisher := func(alive []*worker) int {
			t.Helper()
			var got int
			require.Eventually(t, func() bool {
				n := 0
				for i, w := range alive {
					if w.mgr.Publisher() {
						n, got = n+1, i
					}
				}
				return n == 1
			}, followWait, 5*time.Millisecond, "exactly one publisher")
			return got
		}
		p := publisher(ws)
		fmerge(t, ws[(p+1)%3].mgr, 7, lastExecOf(7, 1))
		for i, w := range ws {
			require.NoError(t, w.mgr.Sync(t.Context()))
			err := w.mgr.Flush(t.Context())
			if i == p {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, state.ErrNotPublisher)
			}
		}
		e, err := ws[0].store.Get(t.Context(), flowstate.StateKey)
		require.NoError(t, err)
		assert.Equal(t, string(encode(lastExecOf(7, 1))), string(e.Value), "the aggregate key, byte for byte")

		// The publisher stops: it releases the lease and another takes over.
		start := time.Now()
		ws[p].stop(t)
		rest := slices.Delete(slices.Clone(ws), p, p+1)
		q := publisher(rest)
		t.Logf("takeover after a release: %v", time.Since(start))
		fmerge(t, rest[q].mgr, 8, lastExecOf(8, 2))
		require.NoError(t, rest[q].mgr.Flush(t.Context()))
		e, err = ws[0].store.Get(t.Context(), flowstate.StateKey)
		require.NoError(t, err)
		want := lastExecOf(7, 1)
		want.LastExecTimeMap[2] = 8002
		assert.Equal(t, string(encode(want)), string(e.Value))
	})
}

// TestReplicasStartOverWhenTheBucketIsCleared clears the bucket
// under two managers: both serve the new epoch, empty at revision 0, and a
// report merged after it is in the new epoch.
func TestReplicasStartOverWhenTheBucketIsCleared(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		a := follow(t, open(), state.ReplicaOptions{})
		b := follow(t, open(), state.ReplicaOptions{})
		r := fmerge(t, a.mgr, 1, lastExecOf(1, 1))
		wipe(t, b.store)
		for name, w := range map[string]*worker{"a": a, "b": b} {
			require.Eventually(t, func() bool {
				s, err := w.mgr.Snapshot(t.Context(), nil)
				return err == nil && s.Epoch != r.Epoch && s.Revision == 0 && len(s.Flows) == 0
			}, followWait, 10*time.Millisecond, "%s: new epoch, empty", name)
		}
		r2 := fmerge(t, b.mgr, 2, lastExecOf(2, 2))
		assert.NotEqual(t, r.Epoch, r2.Epoch)
		v, ver := a.synced(t)
		assert.True(t, v.Equal(lastExecOf(2, 2)), "%v", v)
		assert.Equal(t, r2.Version, ver)
	})
}

// TestReplicaRestartedKeepsStateAndEpoch stops a manager and starts
// another on the same bucket: same state, same version.
func TestReplicaRestartedKeepsStateAndEpoch(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		a := follow(t, open(), state.ReplicaOptions{})
		fmerge(t, a.mgr, 1, lastExecOf(1, 1, 2))
		r := fmerge(t, a.mgr, 2, lastExecOf(2, 3))
		want, _ := fget(t, a.mgr)
		a.stop(t)

		b := follow(t, open(), state.ReplicaOptions{})
		v, ver := fget(t, b.mgr)
		assert.True(t, want.Equal(v))
		assert.Equal(t, r.Version, ver)
	})
}

// TestReplicaVisibilityAcrossManagers: a report acked on one manager
// becomes part of another's state without a read barrier, through its
// watch alone, within followWait; once the last is visible both hold one
// state. BenchmarkReplicaVisibility measures the lag.
func TestReplicaVisibilityAcrossManagers(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		a := follow(t, open(), state.ReplicaOptions{})
		b := follow(t, open(), state.ReplicaOptions{})
		for i := range 200 {
			r := fmerge(t, a.mgr, uint64(i%10), lastExecOf(uint64(i), flowstate.FlowID(i%10)))
			awaitVisible(t, b.mgr, r.Revision)
		}
		want, wantVer := fget(t, a.mgr)
		got, gotVer := fget(t, b.mgr)
		assert.Equal(t, wantVer, gotVer)
		assert.True(t, want.Equal(got), "one state on both managers")
	})
}

// awaitVisible waits, for at most followWait, until m's state, read
// without a read barrier, is at revision rev or past it.
func awaitVisible(tb testing.TB, m *state.Replica, rev uint64) {
	tb.Helper()
	wait.Until(tb, followWait, 20*time.Microsecond, func() (bool, string) {
		ver, err := m.Version(tb.Context())
		require.NoError(tb, err)
		return ver.Revision >= rev, fmt.Sprintf("at revision %d, not yet %d", ver.Revision, rev)
	})
}

// TestReplicaPublisherEvictsSilentNodesForEveryone checks that only the
// publisher evicts, by deleting the nodes' keys, and that every manager
// drops the evicted nodes.
func TestReplicaPublisherEvictsSilentNodesForEveryone(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		ws := []*worker{follow(t, open(), state.ReplicaOptions{}), follow(t, open(), state.ReplicaOptions{})}
		fmerge(t, ws[0].mgr, 1, lastExecOf(1, 1))
		fmerge(t, ws[1].mgr, 2, lastExecOf(2, 2))
		var p int
		require.Eventually(t, func() bool {
			for i, w := range ws {
				if w.mgr.Publisher() {
					p = i
					return true
				}
			}
			return false
		}, followWait, 5*time.Millisecond)
		future := time.Now().Add(time.Hour) // every node is silent by then

		evicted, _, err := ws[1-p].mgr.EvictSilent(t.Context(), future)
		require.NoError(t, err)
		assert.Empty(t, evicted, "only the publisher evicts")

		require.NoError(t, ws[p].mgr.Sync(t.Context())) // it evicts the nodes it has seen
		evicted, res, err := ws[p].mgr.EvictSilent(t.Context(), future)
		require.NoError(t, err)
		slices.Sort(evicted)
		assert.Equal(t, []uint64{1, 2}, evicted)
		assert.True(t, res.Changed)
		for i, w := range ws {
			v, ver := w.synced(t)
			assert.True(t, isEmpty(v), "manager %d: %v", i, v)
			assert.Equal(t, res.Version, ver, "manager %d", i)
			nodes, _, err := w.mgr.Nodes(t.Context())
			require.NoError(t, err)
			assert.Empty(t, nodes, "manager %d", i)
		}
		_, err = ws[0].store.Get(t.Context(), flowstate.NodeKey(1))
		assert.ErrorIs(t, err, kv.ErrNotFound)
	})
}

// TestReplicaBarrierRefusesAStoreThatForgotWhatItServes: a store that
// forgot the writes past an older revision, in the same epoch (servers
// restored from an older copy of their stores), while this replica's watch
// has not noticed, must not let a read barrier pass on the state it
// serves: other workers already serve what the store holds now.
func TestReplicaBarrierRefusesAStoreThatForgotWhatItServes(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{})
	kept := fmerge(t, w.mgr, 1, value(nil, map[flowstate.FlowID]int64{1: 10}, nil))
	fmerge(t, w.mgr, 2, value(nil, map[flowstate.FlowID]int64{2: 20}, nil))
	_, before := w.synced(t)

	mem.StallWatches()
	mem.ForgetAfter(kept.Revision)
	err := w.mgr.Sync(t.Context())
	require.ErrorIs(t, err, kv.ErrUnavailable, "the store no longer holds revision %d", before.Revision)
	_, still := fget(t, w.mgr)
	assert.Equal(t, before, still, "the replica has not noticed")
}

// TestReplicaBarrierRefusesAWipedEpochUntilTheWatchSaysSo: a store cleared
// while this replica's watch has not delivered the clear yet must not let a
// read barrier pass on the old epoch's state (after a purge, the workers'
// old states may differ: a purge drops writes that some watches had read).
func TestReplicaBarrierRefusesAWipedEpochUntilTheWatchSaysSo(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{})
	fmerge(t, w.mgr, 1, value(nil, map[flowstate.FlowID]int64{1: 10}, nil))
	_, before := w.synced(t)

	mem.StallWatches()
	require.NoError(t, mem.Clear(t.Context()))
	err := w.mgr.Sync(t.Context())
	require.ErrorIs(t, err, kv.ErrUnavailable, "the store is in another epoch")
	_, still := fget(t, w.mgr)
	assert.Equal(t, before, still, "the replica has not seen the clear")

	mem.ResumeWatches()
	require.Eventually(t, func() bool { return w.mgr.Sync(t.Context()) == nil }, followWait, time.Millisecond)
	got, after := fget(t, w.mgr)
	assert.NotEqual(t, before.Epoch, after.Epoch)
	assert.Empty(t, got.Flows())
}

// TestReplicaMeasuresSilenceOnItsOwnClock: the servers' clock (the time
// the store gives each write) is an hour ahead of or behind the worker's:
// a node that reported a moment ago by the worker's clock is live, and one
// silent for longer than the TTL by the worker's clock is evicted, either
// way.
func TestReplicaMeasuresSilenceOnItsOwnClock(t *testing.T) {
	const ttl = time.Minute
	for name, skew := range map[string]time.Duration{"servers ahead": time.Hour, "servers behind": -time.Hour} {
		t.Run(name, func(t *testing.T) {
			mem := kv.NewSharedMemory(kv.SharedMemoryOptions{Now: func() time.Time { return time.Now().Add(skew) }})
			clk := fsclock.NewManual(time.Now())
			w := follow(t, mem, state.ReplicaOptions{Clock: clk, LeaseTTL: time.Hour})
			fmerge(t, w.mgr, 1, lastExecOf(1, 1))
			require.Eventually(t, w.mgr.Publisher, followWait, 5*time.Millisecond)

			evicted, _, err := w.mgr.EvictSilent(t.Context(), clk.Now().Add(-ttl))
			require.NoError(t, err)
			assert.Empty(t, evicted, "the node reported a moment ago, by the worker's clock")

			clk.Advance(2 * ttl)
			evicted, _, err = w.mgr.EvictSilent(t.Context(), clk.Now().Add(-ttl))
			require.NoError(t, err)
			assert.Equal(t, []uint64{1}, evicted, "silent for two TTLs by the worker's clock")
		})
	}
}
