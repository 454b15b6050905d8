package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
)

// watcher ranges over a Watch in a goroutine.
type watcher struct {
	states chan client.State // closed when the iterator ends
	errs   chan error
	cancel context.CancelFunc
	seen   []client.State // what next returned so far
}

// startWatch ranges over c.Watch until Cleanup; gate, if not nil, is called
// after each state is handed over, in the loop body (to make it slow).
func startWatch(tb testing.TB, c *client.Client, gate func(n int)) *watcher {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{states: make(chan client.State, 100000), errs: make(chan error, 100), cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(w.states)
		n := 0
		for s, err := range c.Watch(ctx) {
			if err != nil {
				select {
				case w.errs <- err:
				default:
				}
				continue
			}
			n++
			w.states <- s.Clone() // Watch reuses s once the body returns
			if gate != nil {
				gate(n)
			}
		}
	}()
	tb.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitTimeout):
			tb.Error("Watch did not end after its context was canceled")
		}
	})
	return w
}

// next returns the next state, failing after waitTimeout.
func (w *watcher) next(tb testing.TB) client.State {
	tb.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case s, ok := <-w.states:
		require.True(tb, ok, "Watch ended")
		w.seen = append(w.seen, s)
		return s
	case <-timer.C:
		require.FailNow(tb, "no state from Watch", "seen so far: %d states", len(w.seen))
		return client.State{}
	}
}

// until returns the first state for which ok holds.
func (w *watcher) until(tb testing.TB, ok func(client.State) bool) client.State {
	tb.Helper()
	for {
		if s := w.next(tb); ok(s) {
			return s
		}
	}
}

// at returns a predicate for a state at version v or later in v's epoch.
func at(v flowstate.Version) func(client.State) bool {
	return func(s client.State) bool { return s.Epoch == v.Epoch && s.Revision >= v.Revision }
}

// assertInOrder checks that states never repeat or go back within an epoch.
func assertInOrder(tb testing.TB, states []client.State) {
	tb.Helper()
	for i := 1; i < len(states); i++ {
		prev, cur := states[i-1], states[i]
		if cur.Epoch == prev.Epoch {
			assert.Greater(tb, cur.Revision, prev.Revision, "state %d: %s after %s", i, describe(cur), describe(prev))
			assert.False(tb, cur.EpochChanged, "state %d: %s", i, describe(cur))
		} else {
			assert.True(tb, cur.EpochChanged, "state %d: new epoch not flagged: %s after %s", i, describe(cur), describe(prev))
		}
	}
}

func TestWatchUnderConcurrentReportsYieldsIncreasingRevisionsEndingOnTheLatest(t *testing.T) {
	for name, tc := range map[string]struct {
		interval time.Duration
		mode     client.WatchMode
	}{
		"every report":    {0, client.WatchAuto},
		"coalesced":       {5 * time.Millisecond, client.WatchAuto},
		"every report v1": {0, client.WatchV1},
		"coalesced v1":    {5 * time.Millisecond, client.WatchV1},
	} {
		t.Run(name, func(t *testing.T) {
			srv := startServer(t)
			startWorker(t, srv, consumer.Config{PublishInterval: tc.interval})
			c := newClient(t, srv, client.Options{WatchMode: tc.mode})
			w := startWatch(t, c, nil)
			first := w.next(t)
			assert.False(t, first.EpochChanged)

			const nodes, reports = 8, 25
			var wg sync.WaitGroup
			for node := range uint64(nodes) {
				wg.Go(func() {
					for i := range reports {
						id := flowstate.FlowID(node*100 + uint64(i%5))
						if _, err := c.Send(testCtx(t), report(node, uint64(i), int64(i), id, id+50)); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			final, err := c.Get(testCtx(t))
			require.NoError(t, err)

			last := w.until(t, at(final.Version))
			assert.Equal(t, final.Version, last.Version)
			assert.True(t, final.Value.Equal(last.Value), "the last state yielded is the latest")
			for _, s := range w.seen {
				assert.Equal(t, first.Epoch, s.Epoch)
			}
			assertInOrder(t, w.seen)
		})
	}
}

func TestWatchWithASlowLoopSkipsStatesButEndsOnTheLatest(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{PublishInterval: 0})
	c := newClient(t, srv, client.Options{})
	release := make(chan struct{})
	w := startWatch(t, c, func(n int) {
		if n == 1 {
			<-release // the loop body is busy while the reports go in
		}
	})
	w.next(t)

	var v flowstate.Version
	for i := range 200 {
		v = mustSend(t, c, report(1, uint64(i), int64(i), 1))
	}
	close(release)

	last := w.until(t, at(v))
	assert.Equal(t, v, last.Version)
	assert.Equal(t, uint64(199), last.Value.StateSize[1])
	assert.Less(t, len(w.seen), 20, "a slow loop gets the newest state, not every one")
	assertInOrder(t, w.seen)
}

func TestWatchAcrossAWorkerRestartReportsTheNewEpochAndEndsOnItsState(t *testing.T) {
	srv := startServer(t)
	stopA := startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	w := startWatch(t, c, nil)
	w.next(t)
	vA := mustSend(t, c, report(1, 10, 1, 1, 2))
	w.until(t, at(vA))

	stopA()
	startWorker(t, srv, consumer.Config{}) // a new in-memory store: a new epoch
	vB := mustSend(t, c, report(2, 20, 2, 3))
	require.NotEqual(t, vA.Epoch, vB.Epoch)

	s := w.until(t, at(vB))
	final, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, final.Version, s.Version)
	assert.True(t, final.Value.Equal(s.Value))
	assert.Equal(t, map[flowstate.FlowID]uint64{3: 20}, s.Value.StateSize, "flows of the old epoch are gone")

	changed := 0
	for _, s := range w.seen {
		if s.EpochChanged {
			changed++
			assert.Equal(t, vB.Epoch, s.Epoch)
		}
	}
	assert.Equal(t, 1, changed, "the epoch change is flagged once")
	assertInOrder(t, w.seen)
}

func TestWatchWithoutWorkerYieldsErrorsThenTheSnapshotOnceAWorkerServes(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv, client.Options{})
	w := startWatch(t, c, nil)
	select {
	case err := <-w.errs:
		assert.ErrorIs(t, err, client.ErrNoWorker)
	case <-time.After(waitTimeout):
		t.Fatal("no error from Watch without a worker")
	}

	startWorker(t, srv, consumer.Config{})
	s := w.next(t)
	assert.Zero(t, s.Revision)
	assert.False(t, s.EpochChanged)
	v := mustSend(t, c, report(1, 1, 1, 1))
	w.until(t, at(v))
}

func TestWatchEndsWhenItsContextEnds(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	w := startWatch(t, c, nil)
	w.next(t)
	w.cancel()
	select {
	case _, ok := <-w.states:
		assert.False(t, ok, "no state after the context ended")
	case <-time.After(waitTimeout):
		t.Fatal("Watch did not end")
	}
}

func TestWatchTakesASnapshotAfterAReconnect(t *testing.T) {
	srv := startServer(t)
	// A long interval: after the first update, changes are not published
	// for an hour, as if their updates had been lost.
	startWorker(t, srv, consumer.Config{PublishInterval: time.Hour})
	nc := connect(t, srv)
	c, err := client.New(nc, client.Options{})
	require.NoError(t, err)
	w := startWatch(t, c, nil)
	w.next(t)
	vA := mustSend(t, c, report(1, 1, 1, 1))
	w.until(t, at(vA)) // the leading edge is published at once
	vB := mustSend(t, c, report(1, 2, 2, 1))

	require.NoError(t, nc.ForceReconnect())
	s := w.until(t, at(vB))
	assert.Equal(t, vB, s.Version)
	assert.Equal(t, uint64(2), s.Value.StateSize[1])
	assertInOrder(t, w.seen)
}
