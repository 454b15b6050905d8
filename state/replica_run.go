package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/internal/throttle"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/lease"
)

// PublisherKey holds the publisher lease: the id of the worker that holds it.
const PublisherKey = "__flow/publisher"

// Defaults of ReplicaOptions.
const (
	DefaultApplyTimeout = 2 * time.Second
	DefaultLeaseTTL     = lease.DefaultTTL
)

// applyTicks is how many ticks of the clock (ApplyTimeout/applyTicks
// each) a write waits for the watch once stored: between ApplyTimeout and
// 9/8 of it.
const applyTicks = 8

// ErrNotPublisher is returned by a Replica's Flush when it does not hold
// the publisher lease: another worker writes the aggregate and publishes.
var ErrNotPublisher = errors.New("state: not the publisher")

// ErrStoreCleared answers a report whose write landed in a store that was
// wiped meanwhile: the report must be sent again (its node's next
// heartbeat does).
var ErrStoreCleared = errors.New("state: the store was cleared during the write")

// errNotReady answers while a Replica has not read the store.
var errNotReady = fmt.Errorf("state: the state is being read from the store: %w", kv.ErrUnavailable)

// errStopped answers once a Replica's Run has returned.
var errStopped = errors.New("state: the replica no longer follows the store")

// errNotSeen is why a stored write was not acknowledged: the watch did not
// apply it in time, or the Replica stopped.
func errNotSeen(p phase) error {
	if p == stopped {
		return fmt.Errorf("%w: %w", kv.ErrUnavailable, errStopped)
	}
	return fmt.Errorf("%w: %w", kv.ErrUnavailable, context.DeadlineExceeded)
}

// ReplicaOptions configure a Replica. The zero value takes the defaults.
type ReplicaOptions struct {
	// ID names this worker in the publisher lease; a random id if empty.
	ID string
	// ApplyTimeout bounds how long a report waits for its write to come
	// back through the watch once stored, and Sync for the watch to reach
	// the store's last write; DefaultApplyTimeout if 0.
	ApplyTimeout time.Duration
	// LeaseTTL is how long the publisher lease lasts without a renewal;
	// DefaultLeaseTTL if 0.
	LeaseTTL time.Duration
	// Limits bound the state: Submit refuses a report that would pass one,
	// by this replica's state and its own writes in flight, before it
	// writes. Writes that come through the watch are always applied.
	Limits Limits
	Logger *slog.Logger // nil: discard
	// Clock is the worker's clock: the publisher lease's, the deadlines of
	// the writes in flight (ApplyTimeout), Sync's, and the time of a report
	// when the store does not tell it; clock.Real if nil.
	Clock clock.Clock
	// Window is how many reports may wait for their answers (Submit);
	// kv.DefaultWindow if 0. The store must take as many puts in flight.
	Window int
	// MaxReportFlows is the most distinct flows a node's value may name
	// across all its maps, v3 ones included (--max-flows): a report naming
	// more is refused before its write. A value in the store is applied
	// whatever it names (the rule depends on the value alone). 0: no limit.
	MaxReportFlows int
}

func (o ReplicaOptions) withDefaults() ReplicaOptions {
	if o.ApplyTimeout <= 0 {
		o.ApplyTimeout = DefaultApplyTimeout
	}
	if o.Window <= 0 {
		o.Window = kv.DefaultWindow
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	return o
}

// Store is what a Replica needs of the shared store: kv.Shared, and puts
// that do not wait for the store (kv.AsyncPutter: the JetStream store's;
// kv.SharedMemory answers before it returns). It must take at least
// ReplicaOptions.Window puts in flight.
type Store interface {
	kv.Shared
	kv.AsyncPutter
}

// NewReplica returns a Replica of store. It does no I/O and starts nothing:
// Run follows the store.
func NewReplica(store Store, opts ReplicaOptions) (*Replica, error) {
	opts = opts.withDefaults()
	l, err := lease.New(store, lease.Config{Key: PublisherKey, ID: opts.ID, TTL: opts.LeaseTTL, Clock: opts.Clock, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("state: replica: %w", err)
	}
	return &Replica{
		store:    store,
		opts:     opts,
		log:      opts.Logger,
		lease:    l,
		kick:     make(chan struct{}, 1),
		sendKick: make(chan struct{}, 1),
		answers:  make(chan struct{}, 1),
		changes:  make(chan struct{}, 1),
		window:   make(chan struct{}, opts.Window),
		watch:    watched{agg: NewAggregate(), nodes: make(map[uint64]nodeSeen), keys: make(map[uint64]uint64), refused: make(refusals)},
		// At most 10 lines a second: a store full of junk is one outsider's write away.
		refuseLog: throttle.New(10, time.Second),
		writes:    newQueue(opts.Window),
		wait:      waiters{advanced: make(chan struct{})},
	}, nil
}

// Run follows the store until ctx ends: it watches the store, keeps or
// takes the publisher lease, and runs the clock of the writes in flight;
// it releases the lease before it returns, so that another worker takes
// over at once, and answers every report still waiting. It returns nil
// when ctx ends, or the watch's error. Once it has returned, the Replica
// serves nothing. Call it once.
//
// Its goroutines: the watch's (the store calls onEvent on it), the lease's
// (its renewals are I/O, which must not hold up the clock), the sender's
// (sendLoop: the writes sent from outside Submit), and the caller's, which
// ticks the clock and gives the answers that the watch's events and the
// store's answers settle.
func (r *Replica) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.phase != idle {
		r.mu.Unlock()
		return errors.New("state: replica: Run runs once")
	}
	r.phase = loading
	r.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var watchErr error
	wg.Go(func() {
		defer cancel()
		watchErr = r.store.Watch(ctx, r.onEvent)
	})
	wg.Go(func() { r.lease.Run(ctx, r.kick, r.tookLease) })
	wg.Go(func() { r.sendLoop(ctx) })
	t := r.opts.Clock.NewTicker(max(r.opts.ApplyTimeout/applyTicks, time.Millisecond))
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C():
			r.onTick()
		case <-r.answers:
			r.answerReady()
		}
	}
	t.Stop()
	wg.Wait()
	r.stop()
	if watchErr != nil && !errors.Is(watchErr, context.Canceled) {
		return fmt.Errorf("state: replica: watch: %w", watchErr)
	}
	return nil
}

// stop is the end of Run: every report still waiting is answered, those
// whose write awaits the store too (abandoned to its answer), and stop
// returns once the last answer has been given, or ApplyTimeout has passed
// while another goroutine gives them.
func (r *Replica) stop() {
	r.mu.Lock()
	r.phase = stopped
	r.wait.broadcastLocked()
	r.sweepOvertakenLocked() // refuses every overtaken write; those chained after them too
	unsent := r.outbox       // the sender has ended: what it did not send ends here
	r.outbox = nil
	r.mu.Unlock()
	for _, s := range unsent {
		r.recordStored(s.e, kv.Revision{}, fmt.Errorf("state: report of node %d not sent: %w", s.e.node, errNotSeen(stopped)))
	}
	r.answerReady()
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.ApplyTimeout)
	defer cancel()
	_ = r.awaitAnswered(ctx)
}

// takeTurn takes a place in the window for a report, waiting while it is
// full, until ctx ends.
func (r *Replica) takeTurn(ctx context.Context) error {
	select {
	case r.window <- struct{}{}:
		return nil
	default:
	}
	select {
	case r.window <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("state: the window of reports is full: %w: %w", kv.ErrUnavailable, ctx.Err())
	}
}

// Drain waits until every report given to Submit or Refuse has been
// answered, or ctx ends; then it answers those left at once with an error
// wrapping kv.ErrUnavailable and context.Cause(ctx).
func (r *Replica) Drain(ctx context.Context) {
	if r.awaitAnswered(ctx) == nil {
		return
	}
	r.mu.Lock()
	r.writes.failAllLocked(fmt.Errorf("state: report not answered in time: %w: %w", kv.ErrUnavailable, context.Cause(ctx)))
	r.mu.Unlock()
	r.answerReady()
}

// Changes receives, without blocking the Replica, after the served state
// changed or this worker became the publisher: several changes may make one
// receive. It is the worker's one signal to publish.
func (r *Replica) Changes() <-chan struct{} { return r.changes }

func (r *Replica) signalChange() {
	select {
	case r.changes <- struct{}{}:
	default:
	}
}

// tookLease is called by the lease loop when this worker took the lease.
func (r *Replica) tookLease(rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.served.written = 0 // write the aggregate key at once
	if r.watch.delivered >= rev {
		r.deltas.resync = true
		r.signalChange()
	}
}

// wakeAnswers has Run's goroutine answer the reports whose turn has come:
// the watch's and the store's goroutines settle reports, and leave the
// Completions to it. Once Run has ended, stop has answered every report.
func (r *Replica) wakeAnswers() {
	select {
	case r.answers <- struct{}{}:
	default:
	}
}

// kickLease wakes the lease loop.
func (r *Replica) kickLease() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// WaitLoaded waits until the Replica serves the store's state, or Run
// returned, or ctx ends.
func (r *Replica) WaitLoaded(ctx context.Context) error {
	if err := r.await(ctx, func() bool { return r.phase == following || r.phase == frozen }); err != nil {
		return fmt.Errorf("state: replica: read the store: %w", err)
	}
	return nil
}

// Loaded reports whether the state is served: once the watch has delivered
// the store's content, until Run returns.
func (r *Replica) Loaded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase == following || r.phase == frozen
}

// waiters wake the goroutines that wait for the watch or the queue (await).
type waiters struct {
	advanced chan struct{} // closed and replaced whenever they may move, if awaited
	awaited  bool          // an await took advanced since it was last replaced
}

// awaitAnswered waits until every report given to the Replica has been
// answered, the last Completion returned, or ctx ends.
func (r *Replica) awaitAnswered(ctx context.Context) error {
	return r.awaitWhile(ctx, false, func() bool { return r.writes.len == 0 && !r.writes.answering })
}

// await waits until cond, called with mu held, holds, or Run returned, or
// ctx ends.
func (r *Replica) await(ctx context.Context, cond func() bool) error {
	return r.awaitWhile(ctx, true, cond)
}

// awaitWhile waits until cond, called with mu held, holds, or ctx ends; or
// Run returned, if untilStopped.
func (r *Replica) awaitWhile(ctx context.Context, untilStopped bool, cond func() bool) error {
	for {
		r.mu.Lock()
		ok, stopped, advanced := cond(), untilStopped && r.phase == stopped, r.wait.advanced
		r.wait.awaited = true
		r.mu.Unlock()
		switch {
		case ok:
			return nil
		case stopped:
			return errStopped
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// broadcastLocked wakes every await, if any waits.
func (w *waiters) broadcastLocked() {
	if !w.awaited {
		return // no channel to replace: nothing allocated per event
	}
	w.awaited = false
	close(w.advanced)
	w.advanced = make(chan struct{})
}
