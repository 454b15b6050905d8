package flowstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"flowstate/kv"
	"flowstate/lease"
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
	// one, by this replica's state, before it writes. Writes that come
	// through the watch are always applied.
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
	aggFlows     []Flow
	aggJSON      []byte
	fenceRefused bool // the store refused a fenced write while the lease was held; logged

	// mu guards every field below. What is served is epoch and rev, and
	// agg's flows unless frozen, then frozenFlows.
	mu          sync.Mutex
	running     bool
	stopped     bool                    // Run has returned
	ready       bool                    // the watch has delivered the store's content
	epoch       string                  // the store's epoch; "" before the first look
	rev         uint64                  // revision of the served state
	agg         *Aggregate              // what the watch applied
	nodes       map[uint64]*replicaNode // per node of agg
	frozen      bool                    // frozenFlows and rev hold the last exact state
	frozenFlows []Flow
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
	spare       []Flow
	own         map[uint64][]*ownWrite // per node, this worker's writes the watch has not delivered, in order
	ownNew      map[uint64]struct{}    // nodes with writes in own that were new to agg when written
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

// apply is the watch's callback: it applies one event. The lease sees the
// event under mu, after the watermark moved, so that either it or
// tookLease, whichever comes second, sees this worker's takeover applied.
func (r *Replica) apply(ev kv.Event) {
	r.mu.Lock()
	fresh := ev.Op == kv.OpReset || ev.Op == kv.OpSynced || ev.Revision.Seq > r.watermark
	signal := r.applyLocked(ev)
	var free, applied bool
	if fresh && !r.stopped {
		free, applied = r.lease.Observe(ev)
	}
	if applied {
		r.resync = true // a new publisher's first delta makes clients resync
		signal = true
	}
	r.mu.Unlock()
	if free {
		r.kickLease()
	}
	if signal {
		r.opts.OnChange()
	}
}

// applyLocked applies one event and reports whether the served state
// changed.
func (r *Replica) applyLocked(ev kv.Event) bool {
	if r.stopped {
		return false
	}
	switch ev.Op {
	case kv.OpReset:
		r.resetLocked(ev.Revision.Epoch)
		return false
	case kv.OpSynced:
		r.ready = true
		return r.settleLocked()
	}
	if ev.Revision.Seq <= r.watermark {
		return false // delivered twice
	}
	if r.ready && !ev.Exact && !r.frozen {
		r.freezeLocked()
	}
	r.watermark = ev.Revision.Seq
	if strings.HasPrefix(ev.Key, NodeKeyPrefix) {
		r.applyNodeLocked(ev)
	}
	if r.ready && ev.Exact {
		return r.settleLocked()
	}
	r.broadcastLocked() // the watermark moved
	return false
}

// resetLocked starts over at epoch. In the same epoch (the watch restarted)
// it keeps serving the last exact state until the new pass is exact.
func (r *Replica) resetLocked(epoch string) {
	if epoch == r.epoch && r.ready {
		if !r.frozen {
			r.freezeLocked()
		}
		r.resync = true // the reread does not track what changed
	} else {
		if r.epoch != "" {
			r.log.Info("new epoch: the state starts over", slog.String("epoch", epoch), slog.String("previous", r.epoch))
		}
		r.epoch, r.rev = epoch, 0
		r.ready, r.frozen, r.changed = false, false, false
		r.changeRev, r.wroteRev = 0, 0
		r.deltaBase, r.resync = 0, false
	}
	r.agg.Reset()
	clear(r.nodes)
	r.forgetOwnLocked()
	r.watermark, r.nodeRev, r.behind = 0, 0, 0
	r.broadcastLocked()
}

// freezeLocked keeps serving the current state while the watch delivers
// writes that do not make an exact state.
func (r *Replica) freezeLocked() {
	r.frozenFlows = r.agg.AppendFlows(r.frozenFlows[:0])
	r.frozen = true
}

// settleLocked serves the current state, which is exact, and reports
// whether it changed.
func (r *Replica) settleLocked() bool {
	r.frozen = false
	if r.nodeRev > r.rev {
		if r.rev == 0 {
			r.changed = true // the first report of the epoch creates the aggregate
		}
		r.rev = r.nodeRev
	}
	changed := r.changed
	if changed {
		r.changed = false
		r.changeRev = r.rev
	}
	r.broadcastLocked()
	return changed
}

// applyNodeLocked applies a write of a node's key. A write of this worker
// is applied from the flows it retained, others' are decoded.
func (r *Replica) applyNodeLocked(ev kv.Event) {
	digits, ok := strings.CutPrefix(ev.Key, NodeKeyPrefix)
	id, err := strconv.ParseUint(digits, 10, 64)
	if ok && err == nil {
		r.keyBuf = strconv.AppendUint(r.keyBuf[:0], id, 10)
	}
	if !ok || err != nil || string(r.keyBuf) != digits { // the key is NodeKey(id)
		r.log.Warn("ignoring a key under the node prefix that no worker writes", slog.String("key", ev.Key))
		return
	}
	r.spare = r.spare[:0]
	if ev.Op == kv.OpPut {
		if flows, ok := r.ownFlowsLocked(id, ev.Value, ev.Revision.Seq); ok {
			r.spare = flows
		} else {
			flows, err := AppendValueFlows(r.spare, ev.Value)
			if err != nil {
				r.log.Error("ignoring a node report that does not decode", slog.Uint64("node_id", id),
					slog.Uint64("revision", ev.Revision.Seq), slog.Any("err", err))
				return
			}
			r.spare = flows
		}
	}
	r.nodeRev = ev.Revision.Seq
	if ev.Op == kv.OpDelete {
		if r.agg.Remove(id) {
			r.changed = true
		}
		delete(r.nodes, id)
		return
	}
	if r.agg.Apply(id, r.spare) {
		r.changed = true
	}
	delete(r.ownNew, id) // in agg now
	n := r.nodes[id]
	if n == nil {
		n = &replicaNode{}
		r.nodes[id] = n
	}
	// The store's time of the write, so that a node's silence is measured
	// from its report, whenever this worker read it.
	n.seen, n.rev = ev.Time, ev.Revision.Seq
	if n.seen.IsZero() {
		n.seen = r.opts.Now()
	}
}

// tookLease is called by the lease loop when this worker took the lease.
func (r *Replica) tookLease(rev uint64) {
	r.mu.Lock()
	r.wroteRev = 0 // write the aggregate key at once
	signal := r.watermark >= rev
	if signal {
		r.resync = true
	}
	r.mu.Unlock()
	if signal {
		r.opts.OnChange()
	}
}
