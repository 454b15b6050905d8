package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/lease"

	"github.com/flowstate-io/flowstate/flowstate"
)

// PublisherKey holds the publisher lease: the id of the worker that holds it.
const PublisherKey = "__flow/publisher"

// Defaults of ReplicaOptions.
const (
	DefaultApplyTimeout = 2 * time.Second
	DefaultLeaseTTL     = lease.DefaultTTL
)

// ErrNotPublisher is returned by a Replica's Flush when it does not hold
// the publisher lease: another worker writes the aggregate and publishes.
var ErrNotPublisher = errors.New("flowstate: not the publisher")

// errNotReady is returned while a Replica has not read the store.
var errNotReady = fmt.Errorf("flowstate: the state is being read from the store: %w", kv.ErrUnavailable)

// errStopped is returned once a Replica's Run has returned.
var errStopped = errors.New("flowstate: the replica no longer follows the store")

// ReplicaOptions configure a Replica. The zero value takes the defaults.
type ReplicaOptions struct {
	// ID names this worker in the publisher lease; a random id if empty.
	ID string
	// ApplyTimeout bounds how long MergeFlows waits for its write to come
	// back through the watch, and Sync for the watch to reach the store's
	// last write; DefaultApplyTimeout if 0.
	ApplyTimeout time.Duration
	// LeaseTTL is how long the publisher lease lasts without a renewal;
	// DefaultLeaseTTL if 0.
	LeaseTTL time.Duration
	// Limits bound the state: MergeFlows refuses a report that would pass
	// one, by this replica's state and its own writes in flight, before it
	// writes. Writes that come through the watch are always applied.
	Limits Limits
	Logger *slog.Logger // nil: discard
	// Now tells the time of a report when the store does not; time.Now if
	// nil.
	Now func() time.Time
	// Window is how many node-key writes a worker keeps in flight
	// (Submit); DefaultWindow if 0.
	Window int
	// OnChange, if set, is called after the served state changed or this
	// worker became the publisher, so that the state is published; several
	// changes may make one call. It is called outside any lock, from the
	// watch, and must return quickly.
	OnChange func()
}

func (o ReplicaOptions) withDefaults() ReplicaOptions {
	if o.ApplyTimeout <= 0 {
		o.ApplyTimeout = DefaultApplyTimeout
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnChange == nil {
		o.OnChange = func() {}
	}
	return o
}

// Replica serves the state of a store that several workers share
// (kv.Shared): it applies every node-key write of the store's watch, its
// own and the others', in the store's order. See the package
// documentation, "Following a shared store". Create it with NewReplica and
// run it with Run.
type Replica struct {
	store kv.Shared
	opts  ReplicaOptions
	log   *slog.Logger
	lease *lease.Lease
	kick  chan struct{} // wakes the lease loop; capacity 1

	aggMu        sync.Mutex // serialises the aggregate-key writes; guards aggFlows, aggJSON, fenceRefused
	aggFlows     []flowstate.Flow
	aggJSON      []byte
	fenceRefused bool // the store refused a fenced write while the lease was held; logged

	// mu guards every field below. What is served is epoch and rev, and
	// agg's flows unless frozen, then frozenFlows.
	mu          sync.Mutex
	running     bool
	stopped     bool                    // Run has returned
	ready       bool                    // the watch has delivered the store's content
	epoch       string                  // the store's epoch; "" before the first look
	epochStart  uint64                  // where epoch began: node writes below it are the last epoch's (kv.OpReset)
	rev         uint64                  // revision of the served state
	agg         *Aggregate              // what the watch applied
	nodes       map[uint64]*replicaNode // per node of agg
	frozen      bool                    // frozenFlows and rev hold the last exact state
	frozenFlows []flowstate.Flow
	changed     bool          // the aggregate changed since it was last served
	watermark   uint64        // sequence number of the last write the watch delivered
	nodeRev     uint64        // sequence number of the last node-key write applied
	changeRev   uint64        // rev when the served aggregate last changed
	wroteRev    uint64        // rev of the last aggregate-key write by this worker (0: none)
	behind      uint64        // a merge gave up waiting for this write; until the watch reaches it, merges fail at once
	advanced    chan struct{} // closed and replaced whenever what is served advances, if awaited
	awaited     bool          // an await took advanced since it was last replaced
	deltaBase   uint64        // revision of the last Delta in epoch
	resync      bool          // the next Delta must make clients resync
	spare       []flowstate.Flow
	own         map[uint64][]*ownWrite // per node, this worker's writes the watch has not delivered, in order
	ownNew      map[uint64]struct{}    // nodes with writes in own that were new to agg when written
	ownFlows    int                    // the flows of the writes in own, counted against Limits.MaxFlows
	ownFree     []*ownWrite
	keyBuf      []byte
}

// replicaNode is what a Replica keeps of a node beside its report.
type replicaNode struct {
	seen time.Time // when the store took its last write
	rev  uint64    // sequence number of its last write
}

// NewReplica returns a Replica of store. It does no I/O and starts nothing:
// Run follows the store.
func NewReplica(store kv.Shared, opts ReplicaOptions) (*Replica, error) {
	opts = opts.withDefaults()
	l, err := lease.New(store, lease.Config{Key: PublisherKey, ID: opts.ID, TTL: opts.LeaseTTL, Now: opts.Now, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("flowstate: replica: %w", err)
	}
	return &Replica{
		store:    store,
		opts:     opts,
		log:      opts.Logger,
		lease:    l,
		kick:     make(chan struct{}, 1),
		agg:      NewAggregate(),
		nodes:    make(map[uint64]*replicaNode),
		own:      make(map[uint64][]*ownWrite),
		ownNew:   make(map[uint64]struct{}),
		advanced: make(chan struct{}),
	}, nil
}

// Run follows the store until ctx ends: it watches the store and keeps or
// takes the publisher lease, and releases the lease before it returns, so
// that another worker takes over at once. It returns nil when ctx ends, or
// the watch's error. Once it has returned, the Replica serves nothing. Call
// it once.
func (r *Replica) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("flowstate: replica: already running")
	}
	r.running = true
	r.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var watchErr error
	wg.Go(func() {
		defer cancel()
		watchErr = r.store.Watch(ctx, r.apply)
	})
	wg.Go(func() { r.lease.Run(ctx, r.kick, r.tookLease) })
	wg.Wait()

	r.mu.Lock()
	r.stopped = true
	r.broadcastLocked()
	r.mu.Unlock()
	if watchErr != nil && !errors.Is(watchErr, context.Canceled) {
		return fmt.Errorf("flowstate: replica: watch: %w", watchErr)
	}
	return nil
}

// WaitLoaded waits until the Replica serves the store's state, or Run
// returned, or ctx ends.
func (r *Replica) WaitLoaded(ctx context.Context) error {
	if err := r.await(ctx, func() bool { return r.ready }); err != nil {
		return fmt.Errorf("flowstate: replica: read the store: %w", err)
	}
	return nil
}

// Loaded reports whether the state is served: once the watch has delivered
// the store's content, until Run returns.
func (r *Replica) Loaded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready && !r.stopped
}

// await waits until cond, called with mu held, holds, or Run returned, or
// ctx ends.
func (r *Replica) await(ctx context.Context, cond func() bool) error {
	for {
		r.mu.Lock()
		ok, stopped, advanced := cond(), r.stopped, r.advanced
		r.awaited = true
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
func (r *Replica) broadcastLocked() {
	if !r.awaited {
		return // no channel to replace: nothing allocated per event
	}
	r.awaited = false
	close(r.advanced)
	r.advanced = make(chan struct{})
}

// kickLease wakes the lease loop.
func (r *Replica) kickLease() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}
