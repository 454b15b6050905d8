package e2e

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	fsclient "github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
)

// Header names of PROTOCOL.md v2.
const (
	hdrBaseRevision = "Flow-State-Base-Revision"
	hdrResync       = "Flow-State-Resync"
)

// deltaWait bounds the waits of the delta tests.
const deltaWait = 30 * time.Second

// churnReport is round k of node: flows that come and go and change
// values, and flow 1 that every node reports (the aggregate keeps the max).
func churnReport(rng *rand.Rand, node uint64, k int) fsclient.Report {
	v := flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{}, LastExecTimeMap: map[flowstate.FlowID]int64{}, StartTimeMap: map[flowstate.FlowID]int64{}}
	for i := range flowstate.FlowID(20) {
		if rng.IntN(4) == 0 {
			continue // this flow is not on the node this round: it leaves
		}
		id := flowstate.FlowID(node)*100 + i
		v.StateSize[id] = uint64(rng.IntN(1 << 20))
		v.LastExecTimeMap[id] = 1_700_000_000_000 + int64(k)
		if rng.IntN(2) == 0 {
			v.StartTimeMap[id] = 1_690_000_000_000 + int64(node)
		}
	}
	v.LastExecTimeMap[1] = 1_700_000_000_000 + int64(k)*100 + int64(node)
	return fsclient.Report{NodeID: node, Value: v}
}

// sendChurn sends rounds reports from each of nodes nodes concurrently,
// each acknowledged.
func sendChurn(t testing.TB, c *fsclient.Client, nodes, rounds int, seed uint64) {
	t.Helper()
	var wg sync.WaitGroup
	for node := range uint64(nodes) {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, node))
			for k := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), deltaWait)
				_, err := c.Send(ctx, churnReport(rng, node+1, k))
				cancel()
				if !assert.NoError(t, err, "report %d of node %d", k, node+1) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// dropFollower rebuilds the state from flow.state.delta and chunked gets,
// as PROTOCOL.md says, but throws away every tenth delta it receives.
type dropFollower struct {
	t        testing.TB
	c        *fsclient.Client
	msgs     chan *nats.Msg
	state    map[flowstate.FlowID]flowstate.Flow
	ver      flowstate.Version
	received int
	applied  int
	resyncs  int
}

func startDropFollower(t testing.TB, nc *nats.Conn, c *fsclient.Client) *dropFollower {
	t.Helper()
	f := &dropFollower{t: t, c: c, msgs: make(chan *nats.Msg, 1<<16)}
	sub, err := nc.ChanSubscribe("flow.state.delta", f.msgs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	f.snapshot()
	return f
}

// snapshot replaces the state with a chunked get's.
func (f *dropFollower) snapshot() {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deltaWait)
	defer cancel()
	s, err := f.c.Get(ctx)
	require.NoError(f.t, err)
	if s.Epoch == f.ver.Epoch && s.Revision <= f.ver.Revision {
		return
	}
	f.state = map[flowstate.FlowID]flowstate.Flow{}
	for _, fl := range s.Value.Flows() {
		f.state[fl.ID] = fl
	}
	f.ver = s.Version
	f.resyncs++
}

// handle takes one delta.
func (f *dropFollower) handle(msg *nats.Msg) {
	f.t.Helper()
	f.received++
	if f.received%10 == 0 {
		return // dropped
	}
	rev, err := strconv.ParseUint(msg.Header.Get(hdrRevision), 10, 64)
	require.NoError(f.t, err)
	base, err := strconv.ParseUint(msg.Header.Get(hdrBaseRevision), 10, 64)
	require.NoError(f.t, err)
	epoch := msg.Header.Get(hdrEpoch)
	if epoch == f.ver.Epoch && rev <= f.ver.Revision {
		return
	}
	// A delta brings any state from its base up to its revision (it lists
	// every flow changed since base), so a snapshot that is ahead of the
	// base takes it too.
	if epoch != f.ver.Epoch || base > f.ver.Revision || msg.Header.Get(hdrResync) == "1" {
		f.snapshot()
		return
	}
	bodyBase, flows, err := codec.DecodeDelta(msg.Data, nil)
	require.NoError(f.t, err)
	require.Equal(f.t, base, bodyBase)
	for _, fl := range flows {
		if fl.Has == 0 {
			delete(f.state, fl.ID)
		} else {
			f.state[fl.ID] = fl
		}
	}
	f.ver.Revision = rev
	f.applied++
}

// until handles deltas until the follower holds version v; false if it
// does not within wait.
func (f *dropFollower) until(v flowstate.Version, wait time.Duration) bool {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for f.ver != v {
		select {
		case msg := <-f.msgs:
			f.handle(msg)
		case <-timer.C:
			return false
		}
	}
	return true
}

// drain handles the deltas already received.
func (f *dropFollower) drain() {
	for {
		select {
		case msg := <-f.msgs:
			f.handle(msg)
		default:
			return
		}
	}
}

// body is the follower's state in the canonical msgpack form.
func (f *dropFollower) body() []byte {
	flows := make([]flowstate.Flow, 0, len(f.state))
	for _, fl := range f.state {
		flows = append(flows, fl)
	}
	return codec.AppendAggregate(nil, flowstate.ValueOf(flows).Flows())
}

// TestAClientThatDropsEveryTenthDeltaEndsOnTheExactFinalState follows a
// worker under concurrent reports from many nodes with a client that loses
// every tenth delta: it notices each loss by the next delta's base, takes a
// chunked snapshot, and ends on the state of the single-message get, byte
// for byte. The last delta may be the one dropped (or core NATS may lose
// it): like any client, this one learns of it with the next update, so the
// test sends one more report that changes a flow until the follower has
// caught up.
func TestAClientThatDropsEveryTenthDeltaEndsOnTheExactFinalState(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--publish-interval", "1ms")
	nc := connect(t, w.URL)
	c, err := fsclient.New(nc, fsclient.Options{Timeout: deltaWait})
	require.NoError(t, err)
	f := startDropFollower(t, nc, c)

	done := make(chan struct{})
	go func() {
		defer close(done)
		sendChurn(t, c, 20, 100, 1)
	}()
	func() {
		for {
			select {
			case msg := <-f.msgs:
				f.handle(msg)
			case <-done:
				return
			}
		}
	}()

	// Each round has a budget of its own: a round whose last delta was
	// dropped waits for it in vain, and the nudge after it must still go.
	var final fsclient.State
	for nudge := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), deltaWait)
		final = singleState(t, singleGet(t, nc, w.Prefix, deltaWait))
		if f.until(final.Version, messageTimeout) {
			cancel()
			break
		}
		require.Less(t, nudge, 2, "the follower never reached revision %d (at %d)", final.Revision, f.ver.Revision)
		// The nudge must change the aggregate: a report that changes
		// nothing moves the revision but publishes no delta.
		nudgeValue := flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{1_000_000: uint64(nudge) + 1}}
		_, err := c.Send(ctx, fsclient.Report{NodeID: 1000, Value: nudgeValue})
		cancel()
		require.NoError(t, err)
	}
	f.drain()
	assert.Equal(t, codec.AppendAggregate(nil, final.Value.Flows()), f.body(), "the follower's state is the get's, byte for byte")
	t.Logf("deltas received %d, applied %d, snapshots %d", f.received, f.applied, f.resyncs)
	assert.Greater(t, f.applied, f.received/2, "most deltas applied")
	assert.Greater(t, f.resyncs, 1, "dropped deltas made it take snapshots")
}

// TestWatchAcrossAWorkerRestartFollowsTheNewEpochWithDeltas watches with
// client.Watch (deltas and chunked gets) while a worker is killed and a new
// one, in a new epoch, takes over: the watch yields the new epoch's state
// with EpochChanged, never a state twice, and ends on the latest.
func TestWatchAcrossAWorkerRestartFollowsTheNewEpochWithDeltas(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w1 := startWorker(t, srv.URL, "--publish-interval", "5ms")
	nc := connect(t, w1.URL, nats.MaxReconnects(-1))
	c, err := fsclient.New(nc, fsclient.Options{Timeout: deltaWait, WatchMode: fsclient.WatchV2})
	require.NoError(t, err)

	states := startStateWatch(t, c)
	first := nextState(t, states)

	sendChurn(t, c, 10, 10, 2)
	before := singleState(t, singleGet(t, nc, w1.Prefix, deltaWait))
	w1.Kill()
	w2 := launchWorker(t, nil, "--nats-url", srv.URL, "--publish-interval", "5ms")
	w2.awaitReady(w1.ID)
	sendChurn(t, c, 10, 10, 3)
	final := singleState(t, singleGet(t, nc, w2.Prefix, deltaWait))
	require.NotEqual(t, before.Epoch, final.Epoch)

	seen := []fsclient.State{first}
	for s := first; s.Version != final.Version; {
		s = nextState(t, states)
		seen = append(seen, s)
	}
	last := seen[len(seen)-1]
	assert.True(t, final.Value.Equal(last.Value), "the last state yielded is the latest")
	newEpoch := 0
	for i := 1; i < len(seen); i++ {
		prev, cur := seen[i-1], seen[i]
		if cur.Epoch == prev.Epoch {
			assert.Greater(t, cur.Revision, prev.Revision, "never twice, never backwards")
		} else {
			assert.True(t, cur.EpochChanged, "a new epoch is flagged")
			newEpoch++
		}
	}
	assert.Equal(t, 1, newEpoch, "one change of epoch")
}

// startStateWatch ranges over c.Watch until Cleanup, handing over a Clone
// of each state.
func startStateWatch(t testing.TB, c *fsclient.Client) <-chan fsclient.State {
	ctx, cancel := context.WithCancel(context.Background())
	states := make(chan fsclient.State, 1<<16)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for s, err := range c.Watch(ctx) {
			if err == nil {
				states <- s.Clone()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-watchDone
	})
	return states
}

func nextState(t testing.TB, states <-chan fsclient.State) fsclient.State {
	t.Helper()
	select {
	case s := <-states:
		return s
	case <-time.After(deltaWait):
		require.FailNow(t, "no state from Watch")
		return fsclient.State{}
	}
}
