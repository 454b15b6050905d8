package client

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// deltaQueue bounds the deltas waiting while the loop body runs; past it
// the client library drops them, and the next delta's base tells Watch to
// take a snapshot.
const deltaQueue = 1024

// watchDeltas follows <prefix>.state.delta (v2) until the loop or ctx
// ends. It reports fallback when WatchAuto found a worker that predates v2
// (its snapshot came in one message without Flow-State-Chunk): the caller
// then follows <prefix>.state; nothing was yielded but errors.
func (c *Client) watchDeltas(ctx context.Context, yield func(State, error) bool) (fallback bool) {
	msgs := make(chan *nats.Msg, deltaQueue)
	sub, err := c.nc.ChanSubscribe(c.deltaSubject, msgs)
	if err != nil {
		yield(State{}, fmt.Errorf("client: watch %s: %w", c.deltaSubject, err))
		return false
	}
	defer func() { _ = sub.Unsubscribe() }()
	reconnected := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(reconnected)
	w := &deltaWatch{c: c, ctx: ctx, yield: yield, msgs: msgs,
		closed: sub.StatusChanged(nats.SubscriptionClosed), reconnected: reconnected}
	s, chunked, ok := retrySnapshot(ctx, c, w.closed, yield, c.deltaSubject)
	if !ok {
		return false
	}
	if !chunked && c.watchMode == WatchAuto {
		return true
	}
	if w.emitSnapshot(s) {
		w.run()
	}
	return false
}

// deltaWatch is one run of a Watch loop that follows deltas.
type deltaWatch struct {
	c           *Client
	ctx         context.Context
	yield       func(State, error) bool
	msgs        <-chan *nats.Msg
	closed      <-chan nats.SubStatus
	reconnected <-chan nats.Status

	cur     State            // the state yielded last, or being built; its Value is updated in place
	has     bool             // a state was yielded
	dirty   bool             // deltas changed cur since it was yielded
	flows   []flowstate.Flow // the last delta's flows, reused
	changed []flowstate.Flow // the flows changed since cur was yielded
	// want is the version of the last delta that could not be applied: a
	// snapshot behind it is not the current state.
	want flowstate.Version
}

// run applies the deltas until the loop or ctx ends. The deltas that
// queued up while the loop body ran are applied together and yielded as
// one state, so a slow loop gets the newest state, not every one.
func (w *deltaWatch) run() {
	for {
		var msg *nats.Msg
		select {
		case <-w.ctx.Done():
			return
		case <-w.closed:
			w.yield(State{}, fmt.Errorf("client: watch %s: %w", w.c.deltaSubject, nats.ErrConnectionClosed))
			return
		case <-w.reconnected:
			// Deltas published while the connection was down are lost.
			if !w.resync() {
				return
			}
			continue
		case msg = <-w.msgs:
		}
		w.changed = w.changed[:0]
		ok := w.apply(msg)
		for ok && len(w.msgs) > 0 {
			ok = w.apply(<-w.msgs)
		}
		// What was applied is a state of its own: yield it before any
		// snapshot, so that Changed stays exact.
		if !w.yieldCurrent() || (!ok && !w.resync()) {
			return
		}
	}
}

// apply applies the delta msg to the current state if its base allows it;
// it reports false when it cannot be applied (then a snapshot tells what
// is current). A stale or foreign message counts as applied: it changes
// nothing.
func (w *deltaWatch) apply(msg *nats.Msg) bool {
	v, err := parseVersion(msg.Header)
	if err != nil || (v.Epoch == w.cur.Epoch && v.Revision <= w.cur.Revision) {
		return true // not the worker's, stale or a duplicate
	}
	base, err := strconv.ParseUint(msg.Header.Get(protocol.HeaderBaseRevision), 10, 64)
	// A delta lists every flow changed since base with its entry now, so
	// it brings any state between base and its revision to its revision:
	// a snapshot taken between two deltas (its revision ahead of the next
	// delta's base) goes on with deltas instead of taking snapshot after
	// snapshot while reports keep coming.
	if err != nil || msg.Header.Get(protocol.HeaderResync) == "1" ||
		v.Epoch != w.cur.Epoch || base > w.cur.Revision {
		w.want = v
		return false
	}
	bodyBase, flows, err := codec.DecodeDelta(msg.Data, w.flows)
	if err != nil || bodyBase != base {
		w.want = v
		return false
	}
	w.flows = flows
	applyFlows(w.cur.Value, flows)
	w.changed = mergeChanged(w.changed, flows)
	w.cur.Version, w.cur.EpochChanged = v, false
	w.dirty = true
	return true
}

// yieldCurrent yields the current state if deltas changed it since it was
// last yielded; it reports whether to go on.
func (w *deltaWatch) yieldCurrent() bool {
	if !w.dirty {
		return true
	}
	w.dirty = false
	w.cur.Changed = w.changed
	return w.yield(w.cur, nil)
}

// mergeChanged returns the union of acc and flows, both sorted by ID,
// with the entries of flows winning.
func mergeChanged(acc, flows []flowstate.Flow) []flowstate.Flow {
	if len(acc) == 0 {
		return append(acc, flows...)
	}
	out := make([]flowstate.Flow, 0, len(acc)+len(flows))
	i, j := 0, 0
	for i < len(acc) || j < len(flows) {
		switch {
		case j == len(flows) || (i < len(acc) && acc[i].ID < flows[j].ID):
			out = append(out, acc[i])
			i++
		case i == len(acc) || flows[j].ID < acc[i].ID:
			out = append(out, flows[j])
			j++
		default:
			out = append(out, flows[j])
			i++
			j++
		}
	}
	return out
}

// resync takes a snapshot and yields it if it is news; it reports whether
// to go on.
// A snapshot behind the delta that called for it (a get answered by a
// worker that had not applied that revision yet) is yielded if it is
// news, and another is taken after a while, until one reaches the delta's
// revision or another delta comes: after the last delta of a burst no
// other would call for it.
func (w *deltaWatch) resync() bool {
	wait := minRetryWait
	for {
		s, _, ok := retrySnapshot(w.ctx, w.c, w.closed, w.yield, w.c.deltaSubject)
		if !ok || !w.emitSnapshot(s) {
			return false
		}
		if w.want.Epoch == "" || s.Epoch != w.want.Epoch || s.Revision >= w.want.Revision || len(w.msgs) > 0 {
			w.want = flowstate.Version{}
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-w.ctx.Done():
			t.Stop()
			return false
		case <-w.closed:
			t.Stop()
			w.yield(State{}, fmt.Errorf("client: watch %s: %w", w.c.deltaSubject, nats.ErrConnectionClosed))
			return false
		case <-t.C:
		}
		wait = min(2*wait, time.Second) // a delta that comes meanwhile waits at most this
	}
}

// emitSnapshot makes snapshot s current and yields it, unless it is not
// newer than the current state; it reports whether to go on.
func (w *deltaWatch) emitSnapshot(s State) bool {
	switch {
	case !w.has:
	case s.Epoch != w.cur.Epoch:
		s.EpochChanged = true
	case s.Revision <= w.cur.Revision:
		return true // never backwards: a get served by a lagging worker
	}
	s.Changed = changedFlows(w.cur.Value, s.Value)
	w.cur, w.has, w.dirty = s, true, false
	return w.yield(s, nil)
}

// applyFlows applies a delta's flows to v.
func applyFlows(v flowstate.FlowStateValue, flows []flowstate.Flow) {
	for i := range flows {
		f := &flows[i]
		if f.Has&flowstate.HasStateSize != 0 {
			v.StateSize[f.ID] = f.StateSize
		} else {
			delete(v.StateSize, f.ID)
		}
		if f.Has&flowstate.HasLastExecTime != 0 {
			v.LastExecTimeMap[f.ID] = f.LastExecTime
		} else {
			delete(v.LastExecTimeMap, f.ID)
		}
		if f.Has&flowstate.HasStartTime != 0 {
			v.StartTimeMap[f.ID] = f.StartTime
		} else {
			delete(v.StartTimeMap, f.ID)
		}
	}
}

// changedFlows returns the flows of cur whose entry differs from old, and a
// flow with Has == 0 for each flow of old that cur lacks, sorted by ID.
func changedFlows(old, cur flowstate.FlowStateValue) []flowstate.Flow {
	a, b := old.Flows(), cur.Flows()
	var out []flowstate.Flow
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].ID < b[j].ID):
			out = append(out, flowstate.Flow{ID: a[i].ID})
			i++
		case i == len(a) || b[j].ID < a[i].ID:
			out = append(out, b[j])
			j++
		default:
			if a[i] != b[j] {
				out = append(out, b[j])
			}
			i++
			j++
		}
	}
	return out
}
