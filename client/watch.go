package client

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/flowstate"
)

// Bounds of the pause between retries of a snapshot that failed.
const (
	minRetryWait = 100 * time.Millisecond
	maxRetryWait = 5 * time.Second
)

// Watch returns an iterator over the live aggregate. When the loop starts it
// subscribes to the updates, then takes a snapshot with a get, yields it,
// and then yields the updates that are newer than what it yielded last.
// Against a v2 worker (Options.WatchMode) it follows <prefix>.state.delta:
// it applies each delta whose epoch is the current one and whose base is
// at or below the revision it yielded last (a delta lists every flow that
// changed since its base, so it also brings a snapshot taken after its base
// to its revision), and takes a new chunked snapshot otherwise (a delta was
// missed, a new epoch or publisher, a resync delta, a reconnect). Against a v1 worker it follows the full updates on
// <prefix>.state. Either way:
//
//   - Within an epoch, revisions strictly increase: an update whose epoch is
//     the current one and whose revision is not greater is skipped, so no
//     state is yielded twice or goes backwards. The one exception is a
//     forged update: a snapshot is the worker's word, and one below the
//     revision held replaces what is held when an update at or below that
//     revision, past the last snapshot, showed it was not the worker's; an
//     update more than 2^20 revisions ahead is checked with a snapshot
//     before it is taken (see docs/clients.md).
//   - An update of another epoch makes Watch take a new snapshot, which
//     decides the current epoch; when it differs from the last one, that state
//     is yielded with EpochChanged set, and Watch follows the new epoch.
//     Watch also takes a new snapshot when the connection reconnects or the
//     client library dropped updates, since the newest may have been lost.
//   - Buffering is bounded in bytes: while the loop body runs or a
//     snapshot is taken, Watch keeps only the newest full update, or a queue
//     of deltas of at most Options.MaxPendingBytes (past it, it drops them
//     all, yields an error wrapping ErrLimit the first time, and takes a
//     snapshot), so a slow loop skips intermediate states but never sees
//     them out of order, and once updates stop the last state yielded is
//     the latest (the worker's aggregate; its revision may be below a
//     get's, as reports that change nothing publish no update). Deltas cannot take the state held past Options.MaxFlows
//     (a snapshot then tells, and fails while the worker's state is past
//     it). Snapshots are at least Options.SnapshotInterval apart.
//
// Each state carries the flows that changed since the state yielded before
// (State.Changed). Following deltas, Watch updates one Value in place: a
// state's Value and Changed are valid until the loop body returns (keep a
// State.Clone to hold on to one).
//
// The iterator ends when ctx ends or the loop breaks, and then
// unsubscribes. It yields an error (with a zero State) when a snapshot
// fails, for instance while no worker is up; that error does not end it: if
// the loop goes on, Watch retries after a pause that grows up to 5s. It ends
// after yielding an error when it cannot subscribe or the connection closes.
//
// Each run of the loop takes its own subscription; the iterator may be
// ranged over again.
func (c *Client) Watch(ctx context.Context) iter.Seq2[State, error] {
	return func(yield func(State, error) bool) {
		if c.watchMode == WatchV1 {
			c.watchFull(ctx, yield)
			return
		}
		if fallback := c.watchDeltas(ctx, yield); fallback {
			c.watchFull(ctx, yield)
		}
	}
}

// watchFull follows <prefix>.state (v1).
func (c *Client) watchFull(ctx context.Context, yield func(State, error) bool) {
	box := &mailbox{ready: make(chan struct{}, 1)}
	sub, err := c.nc.Subscribe(c.stateSubject, box.put)
	if err != nil {
		yield(State{}, fmt.Errorf("client: watch %s: %w", c.stateSubject, err))
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, c.maxPendingBytes); err != nil {
		yield(State{}, fmt.Errorf("client: watch %s: %w", c.stateSubject, err))
		return
	}
	reconnected := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(reconnected)
	w := &watch{c: c, ctx: ctx, yield: yield, sub: sub,
		closed: sub.StatusChanged(nats.SubscriptionClosed), reconnected: reconnected,
		gate: snapshotGate{interval: c.snapshotInterval}}
	w.run(box)
}

// watch is one run of a Watch loop.
type watch struct {
	c           *Client
	ctx         context.Context
	yield       func(State, error) bool
	sub         *nats.Subscription
	closed      <-chan nats.SubStatus
	reconnected <-chan nats.Status

	gate snapshotGate

	cur     State // the state yielded last
	dropped int   // updates the client library dropped, as last seen
	// confirmed and suspect are deltaWatch's: the revision of the last
	// snapshot, and the highest revision of an update that came at or
	// below the revision held but above confirmed.
	confirmed, suspect uint64
}

// run yields the snapshot, then the updates, until the loop or ctx ends.
func (w *watch) run(box *mailbox) {
	s, ok := w.snapshot()
	if !ok {
		return
	}
	w.cur, w.confirmed = s, s.Revision
	if !w.yield(s, nil) {
		return
	}
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.closed:
			w.yield(State{}, fmt.Errorf("client: watch %s: %w", w.c.stateSubject, nats.ErrConnectionClosed))
			return
		case <-w.reconnected:
			// Updates published while the connection was down are lost:
			// the snapshot tells what is current.
			if !w.resync(update{}) {
				return
			}
			continue
		case <-box.ready:
		}
		u, ok := box.take()
		if !ok {
			continue
		}
		lost := false
		if n, err := w.sub.Dropped(); err == nil && n > w.dropped {
			// The client library dropped updates (a slow consumer): the
			// newest may be among them.
			w.dropped, lost = n, true
		}
		if !lost && !u.mixed && u.version.Epoch == w.cur.Epoch {
			switch {
			case u.below > w.confirmed:
				// An update came after a newer one of its epoch, which the
				// worker's own updates never do: the newer one may be
				// forged. A snapshot tells, and u is not taken on its word.
				w.suspect = max(w.suspect, u.below)
				if !w.resync(update{}) {
					return
				}
				continue
			case u.version.Revision <= w.cur.Revision && u.version.Revision > w.confirmed:
				// At or below what is held, past the last snapshot: what
				// is held may not be the worker's. A snapshot tells.
				w.suspect = max(w.suspect, u.version.Revision)
				if !w.resync(update{}) {
					return
				}
				continue
			case u.version.Revision <= w.cur.Revision:
				continue // stale or a duplicate
			case u.version.Revision-w.cur.Revision > maxRevisionJump:
				// Too far ahead to take on its word: checked with a
				// snapshot, taken only if the worker reached it.
				if !w.resync(u) {
					return
				}
				continue
			}
			if s, err := decodeState(u.msg); err == nil {
				if !w.emit(s) {
					return
				}
				continue
			}
			// An update that does not decode: the snapshot tells what is
			// current rather than ending on a stale state.
		}
		if !w.resync(u) {
			return
		}
	}
}

// resync takes a snapshot after update u showed another epoch (or could
// not be read, or updates may have been lost), yields it if it is news,
// then yields u if it is newer still. It reports whether to go on.
func (w *watch) resync(u update) bool {
	s, ok := w.snapshot()
	if !ok {
		return false
	}
	suspect := w.suspect
	w.suspect = 0
	switch {
	case s.Epoch != w.cur.Epoch:
		s.EpochChanged = true
		if !w.emit(s) {
			return false
		}
	case s.Revision > w.cur.Revision,
		// The snapshot is the worker's word: below the revision held, it
		// replaces what is held when an update showed that revision was
		// not the worker's and the snapshot reached that update.
		s.Revision < w.cur.Revision && suspect != 0 && s.Revision >= suspect:
		if !w.emit(s) {
			return false
		}
	}
	switch {
	case s.Version == w.cur.Version:
		w.confirmed = s.Revision
	case s.Epoch == w.cur.Epoch:
		w.confirmed = max(w.confirmed, s.Revision)
	}
	if u.version.Epoch == w.cur.Epoch && u.version.Revision > w.cur.Revision &&
		u.version.Revision-w.cur.Revision <= maxRevisionJump {
		if s, err := decodeState(u.msg); err == nil {
			return w.emit(s)
		}
	}
	return true
}

// emit makes s current and yields it with the flows that changed.
func (w *watch) emit(s State) bool {
	s.Changed = changedFlows(w.cur.Value, s.Value)
	w.cur = s
	return w.yield(s, nil)
}

// snapshot gets the current state, yielding the errors and retrying with a
// growing pause until it succeeds; ok is false when the loop or ctx ended.
func (w *watch) snapshot() (s State, ok bool) {
	s, _, ok = retrySnapshot(w.ctx, w.c, &w.gate, w.closed, w.yield, w.c.stateSubject, nil)
	return s, ok
}

// retrySnapshot takes a chunked snapshot, no sooner than gate allows (and
// calls before, if not nil, just before each get), yielding the errors and retrying
// with a growing pause until it succeeds; chunked says the worker answered
// in chunks; ok is false when the loop or ctx ended, or closed fired.
func retrySnapshot(ctx context.Context, c *Client, gate *snapshotGate, closed <-chan nats.SubStatus, yield func(State, error) bool, subject string, before func()) (s State, chunked, ok bool) {
	wait := minRetryWait
	for {
		if !gate.wait(ctx, closed) {
			if ctx.Err() == nil {
				yield(State{}, fmt.Errorf("client: watch %s: %w", subject, nats.ErrConnectionClosed))
			}
			return State{}, false, false
		}
		if before != nil {
			before()
		}
		s, chunked, err := c.getChunked(ctx)
		if ctx.Err() != nil {
			return State{}, false, false
		}
		if err == nil {
			return s, chunked, true
		}
		if !yield(State{}, err) {
			return State{}, false, false
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return State{}, false, false
		case <-closed:
			t.Stop()
			yield(State{}, fmt.Errorf("client: watch %s: %w", subject, nats.ErrConnectionClosed))
			return State{}, false, false
		case <-t.C:
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// update is an aggregate message from <prefix>.state, its body not yet
// decoded.
type update struct {
	msg     *nats.Msg
	version flowstate.Version
	// mixed reports that updates of more than one epoch arrived since the
	// last take: the order between epochs is unknown, so only a snapshot
	// can tell which one is current.
	mixed bool
	// below is the highest revision of an update of msg's epoch that came
	// after msg with a lower revision (0 if none): the worker numbers its
	// updates in order, so msg may not be the worker's.
	below uint64
}

// mailbox holds the newest update between the subscription's callback and
// the loop, so that the callback never blocks and memory stays bounded.
type mailbox struct {
	ready chan struct{} // an update is waiting; capacity 1

	mu      sync.Mutex // guards pending and has
	pending update
	has     bool
}

// put keeps msg if it is newer than the update waiting, and notes an
// older one of the same epoch (update.below); it runs on the
// subscription's goroutine. Messages without valid version headers are not
// the worker's and are ignored.
func (b *mailbox) put(msg *nats.Msg) {
	v, err := parseVersion(msg.Header)
	if err != nil {
		return
	}
	b.mu.Lock()
	switch {
	case !b.has:
		b.pending, b.has = update{msg: msg, version: v}, true
	case v.Epoch != b.pending.version.Epoch:
		b.pending = update{msg: msg, version: v, mixed: true}
	case v.Revision > b.pending.version.Revision:
		b.pending.msg, b.pending.version = msg, v
	case v.Revision < b.pending.version.Revision:
		b.pending.below = max(b.pending.below, v.Revision)
	}
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take removes and returns the waiting update, if any.
func (b *mailbox) take() (update, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u, ok := b.pending, b.has
	b.pending, b.has = update{}, false
	return u, ok
}
