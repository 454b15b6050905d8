package flowstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"flowstate/kv"
)

// PublisherKey holds the publisher lease: the id of the worker that holds it.
const PublisherKey = "__flow/publisher"

// Defaults of FollowOptions.
const (
	DefaultApplyTimeout = 2 * time.Second
	DefaultLeaseTTL     = 3 * time.Second
)

// ErrNotPublisher is returned by Flush on a following Manager that does not
// hold the publisher lease: another worker writes the aggregate and
// publishes it.
var ErrNotPublisher = errors.New("flowstate: not the publisher")

// ErrFollowing is returned by Put on a following Manager: its aggregate is
// the store's, which only reports change.
var ErrFollowing = errors.New("flowstate: the state follows a shared store; put is not supported")

// errNotReady is returned while a following Manager has not read the store.
var errNotReady = fmt.Errorf("flowstate: the state is being read from the store: %w", kv.ErrUnavailable)

// FollowOptions configure Follow. The zero value takes the defaults.
type FollowOptions struct {
	// ID names this worker in the publisher lease; a random id if empty.
	ID string
	// ApplyTimeout bounds how long Merge waits for its write to come back
	// through the watch, and Sync for the watch to reach the store's last
	// write; DefaultApplyTimeout if 0.
	ApplyTimeout time.Duration
	// LeaseTTL is how long the publisher lease lasts without a renewal; it
	// is renewed every third of it. DefaultLeaseTTL if 0.
	LeaseTTL time.Duration
	Logger   *slog.Logger // nil: discard
}

func (o FollowOptions) withDefaults() FollowOptions {
	if o.ID == "" {
		o.ID = randomID()
	}
	if o.ApplyTimeout <= 0 {
		o.ApplyTimeout = DefaultApplyTimeout
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// follower is the state of a following Manager.
type follower struct {
	m     *Manager
	store kv.Shared
	opts  FollowOptions
	log   *slog.Logger

	// Guarded by m.mu. m.epoch, m.rev and m.override are what is served:
	// while the watch is not exact, m.override holds the last exact
	// aggregate and m.rev its revision.
	ready     bool              // the watch has delivered the store's content; the state is served
	stopped   bool              // StopFollowing was called
	frozen    bool              // m.override and m.rev hold the last exact state
	changed   bool              // the aggregate changed since it was last served
	watermark uint64            // sequence number of the last write the watch delivered
	nodeRev   uint64            // sequence number of the last node-key write applied
	changeRev uint64            // m.rev when the served aggregate last changed
	wroteRev  uint64            // m.rev of the last aggregate-key write by this worker (0: none in this epoch)
	nodeRevs  map[uint64]uint64 // sequence number of each node's last write
	behind    uint64            // a merge gave up waiting for this write; until the watch reaches it, merges fail at once
	frozenBuf []Flow            // memory of m.override while frozen
	advanced  chan struct{}     // closed and replaced whenever what is served advances
	lease     leaseView         // the publisher lease, as the watch saw it

	changes chan struct{} // a change to publish; capacity 1

	mergeMu sync.Mutex // serialises merge; guards buf
	buf     []byte

	// Guarded by leaseMu, which also serialises this worker's lease and
	// aggregate-key writes so that they use the lease's last revision.
	leaseMu  sync.Mutex
	own      ownLease
	lastRev  uint64 // the lease's revision when this worker last lost or released it
	aggFlows []Flow
	aggJSON  []byte
	acquired atomic.Uint64 // own.acquired, for the watch

	kickLease chan struct{} // capacity 1
	cancel    context.CancelFunc
	watchDone chan struct{}
	leaseDone chan struct{}
}

// Follow makes m follow its store, which must be a kv.Shared (a JetStream
// bucket) that several workers share, as the package documentation
// describes under "Following a shared store". It reads the store and
// returns once m serves its state, or with an error if ctx ends first; from
// then on a watch and a lease run in the background until StopFollowing.
// Call it once, before m is used.
//
// Once following, Merge writes the node's key and returns when m's own
// state includes the write (or with an error wrapping kv.ErrUnavailable
// after FollowOptions.ApplyTimeout); Snapshot, Version and Get serve what
// the watch applied, without store I/O; Sync is the read barrier a get
// should run first; Flush writes the aggregate key only on the publisher
// (ErrNotPublisher elsewhere); EvictSilent evicts only on the publisher,
// with conditional deletes; Put returns ErrFollowing.
func (m *Manager) Follow(ctx context.Context, opts FollowOptions) error {
	store, ok := m.store.(kv.Shared)
	if !ok {
		return fmt.Errorf("flowstate: follow: the store (%T) is not shared", m.store)
	}
	opts = opts.withDefaults()
	f := &follower{
		m:         m,
		store:     store,
		opts:      opts,
		log:       opts.Logger,
		advanced:  make(chan struct{}),
		nodeRevs:  make(map[uint64]uint64),
		changes:   make(chan struct{}, 1),
		kickLease: make(chan struct{}, 1),
		watchDone: make(chan struct{}),
		leaseDone: make(chan struct{}),
	}
	if !m.follow.CompareAndSwap(nil, f) {
		return errors.New("flowstate: follow: already following")
	}
	bg, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.watchDone)
		if err := store.Watch(bg, f.apply); err != nil && bg.Err() == nil {
			f.log.Error("store watch ended", slog.Any("err", err))
		}
	}()
	if err := f.awaitReady(ctx); err != nil {
		cancel()
		<-f.watchDone
		close(f.leaseDone)
		m.mu.Lock()
		f.stopped = true
		m.mu.Unlock()
		return fmt.Errorf("flowstate: follow: %w", err)
	}
	go f.leaseLoop(bg)
	return nil
}

// Following reports whether m follows a shared store.
func (m *Manager) Following() bool { return m.follow.Load() != nil }

// Changes returns a channel that receives a value after the state a
// following Manager serves has changed, or it became the publisher, so
// that the aggregate should be published; several changes may give one
// value. Nil when m does not follow a store.
func (m *Manager) Changes() <-chan struct{} {
	if f := m.follow.Load(); f != nil {
		return f.changes
	}
	return nil
}

// StopFollowing releases the publisher lease, if m holds it, so that
// another worker takes over at once, and stops the watch. Merges and gets
// fail afterwards. It returns when that is done or ctx ends.
func (m *Manager) StopFollowing(ctx context.Context) error {
	f := m.follow.Load()
	if f == nil {
		return nil
	}
	m.mu.Lock()
	if f.stopped {
		m.mu.Unlock()
		return nil
	}
	f.stopped = true
	f.broadcastLocked()
	m.mu.Unlock()
	f.cancel()
	var err error
	for _, done := range []chan struct{}{f.leaseDone, f.watchDone} {
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("flowstate: stop following: %w", ctx.Err())
		}
	}
	f.release(ctx)
	return err
}

// Sync is a read barrier: on a following Manager it waits until the state
// includes every write the store had taken when Sync was called, so that a
// get that follows includes every report any worker acknowledged before.
// It gives up after FollowOptions.ApplyTimeout, or at once when the store
// is unavailable, with an error wrapping kv.ErrUnavailable; the state is
// then only as recent as the watch made it. Without a shared store it does
// nothing.
func (m *Manager) Sync(ctx context.Context) error {
	f := m.follow.Load()
	if f == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.opts.ApplyTimeout)
	defer cancel()
	if err := f.awaitReady(ctx); err != nil {
		return fmt.Errorf("%w: %w", errNotReady, err)
	}
	f.m.mu.Lock()
	err := f.behindLocked()
	f.m.mu.Unlock()
	if err != nil {
		return err
	}
	last, err := f.store.LastRevision(ctx)
	if err != nil {
		return fmt.Errorf("flowstate: sync: %w", err)
	}
	return f.await(ctx, func() bool { return f.servedLocked(last.Seq) })
}

// awaitReady waits until the state is served.
func (f *follower) awaitReady(ctx context.Context) error {
	return f.await(ctx, func() bool { return f.ready })
}

// await waits until cond, called with m.mu held, holds, or the follower is
// stopped, or ctx ends.
func (f *follower) await(ctx context.Context, cond func() bool) error {
	for {
		f.m.mu.Lock()
		ok, stopped, advanced := cond(), f.stopped, f.advanced
		f.m.mu.Unlock()
		switch {
		case ok:
			return nil
		case stopped:
			return errors.New("flowstate: no longer following the store")
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// servedLocked reports whether the served state includes the write seq.
func (f *follower) servedLocked(seq uint64) bool {
	return f.ready && !f.frozen && f.watermark >= seq
}

// behindLocked returns an error while a write that a merge gave up waiting
// for has not come back through the watch.
func (f *follower) behindLocked() error {
	if f.behind > f.watermark {
		return fmt.Errorf("flowstate: the store's watch has not reached revision %d yet: %w", f.behind, kv.ErrUnavailable)
	}
	return nil
}

// checkLocked is what Snapshot and Version check before serving.
func (f *follower) checkLocked() error {
	if !f.ready || f.stopped {
		return errNotReady
	}
	return nil
}

// merge writes a node's report to the store and waits until the watch has
// applied it.
func (f *follower) merge(ctx context.Context, nodeID uint64, flows []Flow) (MergeResult, error) {
	f.mergeMu.Lock()
	defer f.mergeMu.Unlock()
	f.buf = AppendJSON(f.buf[:0], flows) // flows without any field write nothing
	m := f.m
	m.mu.Lock()
	err := f.checkLocked()
	if err == nil {
		err = f.behindLocked()
	}
	epoch, watermark, rev := m.epoch, f.watermark, m.rev
	m.mu.Unlock()
	if err != nil {
		return MergeResult{}, err
	}
	written, err := f.store.Put(ctx, NodeKey(nodeID), f.buf)
	if err != nil {
		return MergeResult{}, fmt.Errorf("flowstate: store report of node %d: %w", nodeID, err)
	}
	if written.Seq <= watermark {
		// A new write below what the watch has seen: the bucket was
		// recreated under us, and the watch is about to start over.
		return MergeResult{}, fmt.Errorf("%w (revision %d went back below %d)", ErrStoreCleared, written.Seq, watermark)
	}
	wctx, cancel := context.WithTimeout(ctx, f.opts.ApplyTimeout)
	defer cancel()
	var res MergeResult
	err = f.await(wctx, func() bool {
		if m.epoch != epoch {
			return true
		}
		if !f.servedLocked(written.Seq) {
			return false
		}
		res = MergeResult{Version: Version{Epoch: epoch, Revision: written.Seq}, Changed: f.changeRev > rev}
		return true
	})
	switch {
	case err != nil:
		// The watch is stalled (its consumer moves to another server, or
		// the store is slow): fail the next merges at once rather than
		// let reports queue behind this wait, until it catches up.
		m.mu.Lock()
		if m.epoch == epoch {
			f.behind = max(f.behind, written.Seq)
		}
		m.mu.Unlock()
		return MergeResult{}, fmt.Errorf("flowstate: report of node %d stored at revision %d, not seen by the watch: %w: %w",
			nodeID, written.Seq, kv.ErrUnavailable, err)
	case res.Revision == 0:
		return MergeResult{}, fmt.Errorf("%w (epoch %s ended)", ErrStoreCleared, epoch)
	}
	return res, nil
}

// evict deletes the key of every node whose last report was written before
// cutoff, as EvictSilent does, and waits until the watch has applied the
// deletions. Only the publisher evicts, for every worker; each deletion is
// conditional on the node's last write, so a report that came in meanwhile
// stays.
func (f *follower) evict(ctx context.Context, cutoff time.Time) ([]uint64, MergeResult, error) {
	m := f.m
	f.leaseMu.Lock()
	publisher := f.publisherLocked()
	f.leaseMu.Unlock()
	m.mu.Lock()
	err := f.checkLocked()
	epoch, rev := m.epoch, m.rev
	type silent struct {
		id  uint64
		key string
		rev uint64
	}
	var nodes []silent
	for id, n := range m.nodes {
		if n.seen.Before(cutoff) {
			nodes = append(nodes, silent{id, n.key, f.nodeRevs[id]})
		}
	}
	m.mu.Unlock()
	res := MergeResult{Version: Version{Epoch: epoch, Revision: rev}}
	if err != nil || !publisher {
		return nil, res, err
	}
	var evicted []uint64
	var last uint64
	for _, n := range nodes {
		del, err := f.store.DeleteIf(ctx, n.key, kv.Condition{Key: n.key, Revision: n.rev})
		if errors.Is(err, kv.ErrRevisionMismatch) {
			continue // it reported again
		}
		if err != nil {
			return evicted, res, fmt.Errorf("flowstate: evict node %d: %w", n.id, err)
		}
		evicted = append(evicted, n.id)
		last = del.Seq
	}
	if last == 0 {
		return evicted, res, nil
	}
	wctx, cancel := context.WithTimeout(ctx, f.opts.ApplyTimeout)
	defer cancel()
	err = f.await(wctx, func() bool {
		if m.epoch != epoch || !f.servedLocked(last) {
			return m.epoch != epoch
		}
		res = MergeResult{Version: Version{Epoch: epoch, Revision: m.rev}, Changed: f.changeRev > rev}
		return true
	})
	if err != nil {
		return evicted, res, fmt.Errorf("flowstate: evictions not seen by the watch: %w: %w", kv.ErrUnavailable, err)
	}
	return evicted, res, nil
}

// apply is the watch's callback: it applies one event under m.mu.
func (f *follower) apply(ev kv.Event) {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if f.stopped {
		return
	}
	switch ev.Op {
	case kv.OpReset:
		f.resetLocked(ev.Revision.Epoch)
		return
	case kv.OpSynced:
		if !f.ready {
			f.ready = true
			f.lease.seen = time.Now()
			f.kick()
		}
		f.settleLocked()
		return
	}
	if ev.Revision.Seq <= f.watermark {
		return // delivered twice
	}
	if f.ready && !ev.Exact && !f.frozen {
		f.freezeLocked()
	}
	f.watermark = ev.Revision.Seq
	switch {
	case strings.HasPrefix(ev.Key, NodeKeyPrefix):
		f.applyNodeLocked(ev)
	case ev.Key == PublisherKey:
		f.applyLeaseLocked(ev)
	}
	if f.ready && ev.Exact {
		f.settleLocked()
	}
}

// resetLocked starts over at epoch. In the same epoch (the watch restarted)
// it keeps serving the last exact state until the new pass is exact.
func (f *follower) resetLocked(epoch string) {
	m := f.m
	if epoch == m.epoch && f.ready {
		if !f.frozen {
			f.freezeLocked()
		}
		clear(m.nodes)
		clear(m.flows)
		m.order = nil
		clear(f.nodeRevs)
	} else {
		if m.epoch != "" {
			f.log.Info("new epoch: the state starts over", slog.String("epoch", epoch), slog.String("previous", m.epoch))
		}
		m.resetLocked(epoch)
		clear(f.nodeRevs)
		f.ready, f.frozen, f.changed = false, false, false
		f.changeRev, f.wroteRev = 0, 0
		f.lease = leaseView{}
	}
	f.watermark, f.nodeRev, f.behind = 0, 0, 0
	f.broadcastLocked()
}

// freezeLocked keeps serving the current state while the watch delivers
// writes that do not make an exact state.
func (f *follower) freezeLocked() {
	m := f.m
	if f.frozenBuf == nil {
		f.frozenBuf = make([]Flow, 0, len(m.flows))
	}
	// Snapshot copies m.override out, so its memory is reused next time.
	m.override = m.appendAggregateLocked(f.frozenBuf[:0])
	f.frozenBuf = m.override
	f.frozen = true
}

// settleLocked serves the current state, which is exact.
func (f *follower) settleLocked() {
	m := f.m
	if f.frozen {
		m.override = nil
		f.frozen = false
	}
	if f.nodeRev > m.rev {
		if m.rev == 0 {
			f.changed = true // the first report of the epoch creates the aggregate
		}
		m.rev = f.nodeRev
	}
	if f.changed {
		f.changed = false
		f.changeRev = m.rev
		f.signal()
	}
	f.broadcastLocked()
}

// applyNodeLocked applies a write of a node's key.
func (f *follower) applyNodeLocked(ev kv.Event) {
	m := f.m
	id, err := ParseNodeKey([]byte(ev.Key))
	if err != nil || NodeKey(id) != ev.Key {
		f.log.Warn("ignoring a key under the node prefix that no worker writes", slog.String("key", ev.Key))
		return
	}
	var incoming []Flow
	if ev.Op == kv.OpPut {
		v, err := DecodeValue(ev.Value)
		if err != nil {
			f.log.Error("ignoring a node report that does not decode", slog.Uint64("node_id", id),
				slog.Uint64("revision", ev.Revision.Seq), slog.Any("err", err))
			return
		}
		incoming = v.appendFlows(m.spare[:0], m.index)
	}
	f.nodeRev = ev.Revision.Seq
	n := m.nodes[id]
	if n == nil {
		if ev.Op == kv.OpDelete {
			delete(f.nodeRevs, id)
			return
		}
		n = &node{key: ev.Key}
		m.nodes[id] = n
	}
	if m.applyLocked(id, n, incoming) {
		f.changed = true
	}
	n.flows, m.spare = incoming, n.flows[:0]
	// The store's time of the write, so that a node's silence is measured
	// from its report, whenever this worker read it.
	n.seen = ev.Time
	if n.seen.IsZero() {
		n.seen = m.opts.Now()
	}
	f.nodeRevs[id] = ev.Revision.Seq
	if ev.Op == kv.OpDelete {
		delete(m.nodes, id)
		delete(f.nodeRevs, id)
	}
}

// broadcastLocked wakes every await.
func (f *follower) broadcastLocked() {
	close(f.advanced)
	f.advanced = make(chan struct{})
}

// signal sends a value on changes unless one is pending.
func (f *follower) signal() {
	select {
	case f.changes <- struct{}{}:
	default:
	}
}

// kick wakes the lease loop.
func (f *follower) kick() {
	select {
	case f.kickLease <- struct{}{}:
	default:
	}
}

// Loaded reports whether the state is served: always for a store of this
// process; for a shared store, once the watch has delivered its content.
func (m *Manager) Loaded() bool {
	f := m.follow.Load()
	if f == nil {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return f.ready && !f.stopped
}
