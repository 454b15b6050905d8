package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// maxRevisionJump is how far past the revision held a delta may go before
// Watch checks it with a snapshot instead of applying it: a worker's
// revisions count its reports, and no delta of a live worker runs this far
// ahead of a client that keeps up, while a forged one would hold every
// later delta off as stale.
const maxRevisionJump = 1 << 20

// maxChase bounds the snapshots Watch takes after one delta it could not
// apply to reach that delta's revision (a get answered before the worker
// applied it): a revision no worker reaches ends the chase.
const maxChase = 5

// watchDeltas follows <prefix>.state.delta (v2) until the loop or ctx
// ends. It reports fallback when WatchAuto found a worker that predates v2
// (its snapshot came in one message without Flow-State-Chunk): the caller
// then follows <prefix>.state; nothing was yielded but errors.
func (c *Client) watchDeltas(ctx context.Context, yield func(State, error) bool) (fallback bool) {
	q := newPendingQueue(c.maxPendingBytes)
	sub, err := c.nc.Subscribe(c.deltaSubject, q.put)
	if err != nil {
		yield(State{}, fmt.Errorf("client: watch %s: %w", c.deltaSubject, err))
		return false
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The library's own queue, before q, is bounded the same way; the
	// callback only moves a message into q, so it stays near empty.
	if err := sub.SetPendingLimits(-1, c.maxPendingBytes); err != nil {
		yield(State{}, fmt.Errorf("client: watch %s: %w", c.deltaSubject, err))
		return false
	}
	reconnected := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(reconnected)
	w := &deltaWatch{c: c, ctx: ctx, yield: yield, q: q, sub: sub,
		closed: sub.StatusChanged(nats.SubscriptionClosed), reconnected: reconnected,
		gate: snapshotGate{interval: c.snapshotInterval}}
	s, chunked, ok := retrySnapshot(ctx, c, &w.gate, w.closed, yield, c.deltaSubject, nil)
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
	q           *pendingQueue
	sub         *nats.Subscription
	closed      <-chan nats.SubStatus
	reconnected <-chan nats.Status
	gate        snapshotGate

	dropped int  // deltas the client library dropped, as last seen
	said    bool // the watch said that it dropped deltas past its bound
	nflows  int  // the distinct flows of cur.Value

	cur     State            // the state yielded last, or being built; its Value is updated in place
	has     bool             // a state was yielded
	dirty   bool             // deltas changed cur since it was yielded
	flows   []flowstate.Flow // the last delta's flows, reused
	changed []flowstate.Flow // the flows changed since cur was yielded
	// want is the version of the last delta that could not be applied: a
	// snapshot behind it is not the current state.
	want     flowstate.Version
	lostSome bool // deltas were dropped past the bound: sayDropped tells
	// confirmed is the revision of the last snapshot, in cur's epoch: the
	// revisions above it were taken from deltas. suspect is the highest
	// revision of a delta that came at or below the revision held but
	// above confirmed (0 if none since the last snapshot): a delta the
	// worker's own deltas do not send, unless what is held is not the
	// worker's (a forged delta ran ahead).
	confirmed, suspect uint64
}

// run applies the deltas until the loop or ctx ends. The deltas that
// queued up while the loop body ran are applied together and yielded as
// one state, so a slow loop gets the newest state, not every one.
func (w *deltaWatch) run() {
	for {
		if !w.q.waiting() {
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
			case <-w.q.ready:
			}
		} else if w.ctx.Err() != nil {
			return
		}
		w.changed = w.changed[:0]
		ok := true
		for ok {
			if w.lost() {
				ok = false
				break
			}
			msg, has := w.q.pop()
			if !has {
				break
			}
			ok = w.apply(msg)
		}
		// What was applied is a state of its own: yield it before any
		// snapshot, so that Changed stays exact.
		if !w.yieldCurrent() {
			return
		}
		if !ok && (!w.sayDropped() || !w.resync()) {
			return
		}
	}
}

// lost reports whether deltas were dropped past the bound, by the queue or
// the client library, since it was last called.
func (w *deltaWatch) lost() bool {
	lost := w.q.dropped()
	if n, err := w.sub.Dropped(); err == nil && n > w.dropped {
		w.dropped, lost = n, true
	}
	if lost {
		w.want = flowstate.Version{}
		w.lostSome = true
	}
	return lost
}

// sayDropped yields, the first time only, that the watch dropped deltas
// past its bound; it reports whether to go on.
func (w *deltaWatch) sayDropped() bool {
	if !w.lostSome || w.said {
		return true
	}
	w.lostSome, w.said = false, true
	return w.yield(State{}, fmt.Errorf("%w: watch %s dropped the deltas waiting past %d bytes (MaxPendingBytes), and takes a snapshot (said once per watch)", ErrLimit, w.c.deltaSubject, w.c.maxPendingBytes))
}

// apply applies the delta msg to the current state if its base allows it;
// it reports false when it cannot be applied (then a snapshot tells what
// is current). A stale or foreign message counts as applied: it changes
// nothing.
func (w *deltaWatch) apply(msg *nats.Msg) bool {
	v, err := parseVersion(msg.Header)
	if err != nil {
		return true // not the worker's
	}
	if v.Epoch == w.cur.Epoch && v.Revision <= w.cur.Revision {
		if v.Revision > w.confirmed {
			// The worker numbers its deltas in order: one at or below
			// what is held, yet past the last snapshot, says that what is
			// held may not be the worker's. A snapshot tells.
			w.suspect = max(w.suspect, v.Revision)
			return false
		}
		return true // stale or a duplicate
	}
	base, flows, err := readDelta(msg, w.flows)
	// A delta lists every flow changed since base with its entry now, so
	// it brings any state between base and its revision to its revision:
	// a snapshot taken between two deltas (its revision ahead of the next
	// delta's base) goes on with deltas instead of taking snapshot after
	// snapshot while reports keep coming. A delta that runs too far ahead
	// is checked with a snapshot first.
	if err != nil || v.Epoch != w.cur.Epoch || base > w.cur.Revision || v.Revision-w.cur.Revision > maxRevisionJump {
		w.want = v
		return false
	}
	w.flows = flows
	w.nflows += applyFlows(w.cur.Value, flows)
	w.changed = mergeChanged(w.changed, flows)
	w.cur.Version, w.cur.EpochChanged = v, false
	w.dirty = true
	if w.nflows > w.c.maxFlows {
		// Past the bound: a snapshot tells what is current, and fails
		// when the worker's state is past it too.
		w.want = flowstate.Version{}
		return false
	}
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

// resync takes a snapshot and yields it if it is news; it reports whether
// to go on.
// A snapshot behind the delta that called for it (a get answered by a
// worker that had not applied that revision yet) is yielded if it is
// news, and another is taken after a while, until one reaches the delta's
// revision or another delta comes: after the last delta of a burst no
// other would call for it. The chase ends after maxChase snapshots, or
// at once when the delta ran too far ahead to be the worker's.
func (w *deltaWatch) resync() bool {
	wait := minRetryWait
	for try := 1; ; try++ {
		s, _, ok := retrySnapshot(w.ctx, w.c, &w.gate, w.closed, w.yield, w.c.deltaSubject, w.drain)
		if !ok || !w.emitSnapshot(s) {
			return false
		}
		if w.want.Epoch == "" || s.Epoch != w.want.Epoch || s.Revision >= w.want.Revision ||
			w.want.Revision-s.Revision > maxRevisionJump || try == maxChase || w.q.waiting() {
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

// drain drops the deltas waiting, just before a get: the snapshot it
// takes was asked for after they were published, so it covers them (and
// when it does not, the last of them is the revision to chase). A storm
// of deltas that each call for a snapshot so costs one get per interval,
// not one per delta.
func (w *deltaWatch) drain() {
	for {
		msg, ok := w.q.pop()
		if !ok {
			return
		}
		if v, err := parseVersion(msg.Header); err == nil {
			w.want = v
		}
	}
}

// emitSnapshot makes snapshot s current and yields it, unless it is not
// newer than the current state; it reports whether to go on. The snapshot
// is the worker's word: one of the epoch held, below the revision held,
// replaces what is held when a delta showed that revision was not the
// worker's (suspect) and the snapshot reached that delta.
func (w *deltaWatch) emitSnapshot(s State) bool {
	suspect := w.suspect
	w.suspect = 0
	switch {
	case !w.has:
	case s.Epoch != w.cur.Epoch:
		s.EpochChanged = true
	case s.Revision == w.cur.Revision:
		w.confirmed = s.Revision
		return true
	case s.Revision < w.cur.Revision && (suspect == 0 || s.Revision < suspect):
		w.confirmed = max(w.confirmed, s.Revision)
		return true // never backwards: a get served by a lagging worker
	}
	s.Changed = changedFlows(w.cur.Value, s.Value)
	w.cur, w.has, w.dirty = s, true, false
	w.confirmed, w.nflows = s.Revision, s.Value.Len()
	return w.yield(s, nil)
}

// applyFlows applies a delta's flows to v and returns by how many its
// distinct flows grew (less than 0: shrank).
func applyFlows(v flowstate.FlowStateValue, flows []flowstate.Flow) (grew int) {
	for i := range flows {
		f := &flows[i]
		_, a := v.StateSize[f.ID]
		_, b := v.LastExecTimeMap[f.ID]
		_, c := v.StartTimeMap[f.ID]
		was := a || b || c
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
		switch is := f.Has&(flowstate.HasStateSize|flowstate.HasLastExecTime|flowstate.HasStartTime) != 0; {
		case is && !was:
			grew++
		case was && !is:
			grew--
		}
	}
	return grew
}

// readDelta reads a delta update's Flow-State-Base-Revision and body: its
// base and flows (appended to dst[:0]), or an error when the delta is a
// resync (Flow-State-Resync: 1), its base header is not a decimal uint64 (no sign, no leading zero),
// its body is invalid or names another base. A delta it refuses is not
// applied: the watch takes a snapshot instead.
func readDelta(msg *nats.Msg, dst []flowstate.Flow) (uint64, []flowstate.Flow, error) {
	if msg.Header.Get(protocol.HeaderResync) == "1" {
		return 0, nil, errors.New("a resync delta")
	}
	h := msg.Header.Get(protocol.HeaderBaseRevision)
	base, err := strconv.ParseUint(h, 10, 64)
	if err != nil || !canonicalUint(h) {
		return 0, nil, fmt.Errorf("%s %q is not a decimal uint64", protocol.HeaderBaseRevision, h)
	}
	bodyBase, flows, err := codec.DecodeDelta(msg.Data, dst)
	if err != nil {
		return 0, nil, err
	}
	if bodyBase != base {
		return 0, nil, fmt.Errorf("the body's base %d is not %s %d", bodyBase, protocol.HeaderBaseRevision, base)
	}
	return base, flows, nil
}
