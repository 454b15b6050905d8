package flowstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"flowstate/kv"
)

// ErrStoreCleared is returned by Merge, Put and Flush when the store was
// cleared while they wrote to it: the write landed in the old epoch and was
// wiped, so the report must be sent again (its node's next heartbeat does).
var ErrStoreCleared = errors.New("flowstate: the store was cleared during the write")

// ErrUnsortedFlows is returned by MergeFlows when its flows are not sorted by
// ID with each ID once.
var ErrUnsortedFlows = errors.New("flowstate: flows are not sorted by id without duplicates")

// Version names a state: the epoch of its lineage and its revision within it.
// Revision 0 means that no report has been merged in this epoch.
type Version struct {
	Epoch    string
	Revision uint64
}

// MergeResult is what Merge produced.
type MergeResult struct {
	Version
	// Changed reports whether the aggregate differs from before the merge.
	Changed bool
}

// Snapshot is a copy of the aggregate at one version.
type Snapshot struct {
	Version
	// Flows is the aggregate, sorted by ID.
	Flows []Flow
}

// Value returns the snapshot's aggregate as a FlowStateValue.
func (s Snapshot) Value() FlowStateValue { return ValueOf(s.Flows) }

// Options configure a Manager. The zero value is the seed's behaviour.
type Options struct {
	// DeferAggregateWrite makes Merge leave the aggregate key (StateKey)
	// unwritten; Flush writes it. The worker flushes at the cadence of its
	// flow.state updates. Get, Snapshot and Merge results are current either
	// way.
	DeferAggregateWrite bool
	// Now tells the time of a report, for Nodes and EvictSilent; nil means
	// time.Now.
	Now func() time.Time
}

// Manager keeps the aggregate of every node's last report. See the package
// documentation for its rules.
type Manager struct {
	store  kv.Store
	opts   Options
	follow atomic.Pointer[follower] // set by Follow (follow.go)

	// flushMu serialises the writes of the aggregate key that Flush makes
	// outside mu, and guards flushFlows and flushBuf. Taken before mu.
	flushMu    sync.Mutex
	flushFlows []Flow
	flushBuf   []byte

	// mu serialises every operation, as the seed's merge lock does, and
	// guards all fields below.
	mu       sync.Mutex
	epoch    string               // epoch of the store that nodes and flows mirror; "" before the first look
	rev      uint64               // revision of the last applied write in epoch
	nodes    map[uint64]*node     // each node's last report
	flows    map[FlowID]*mAggFlow // per flow: the nodes reporting it and their max
	order    []*mAggFlow          // flows sorted by ID; nil when it must be rebuilt
	override []Flow               // the value of the last Put, until the next Merge; nil if none
	dirty    bool                 // the aggregate key lags behind the aggregate

	// Scratch space reused by Merge so that a steady stream of reports does
	// not allocate.
	buf       []byte
	spare     []Flow
	spareAggs []*mAggFlow
	agg       []Flow // the aggregate being written by flushLocked; never a node's report
	index     map[FlowID]int
}

// node is one node's last report.
type node struct {
	key   string
	seen  time.Time   // when its last report was applied
	flows []Flow      // sorted by ID, only flows with at least one field
	aggs  []*mAggFlow // aggs[i] is the entry of flows[i] in Manager.flows
}

// mAggFlow is one flow of the aggregate: every node's contribution to it, and
// their per-field max.
type mAggFlow struct {
	agg Flow
	// contribs is usually one (a flow runs on one flownode), held in first
	// so that it shares agg's memory.
	contribs []mContrib
	first    [1]mContrib
}

type mContrib struct {
	node uint64
	flow Flow
}

// NewManager returns a Manager that keeps its keys in store.
func NewManager(store kv.Store, opts Options) *Manager {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Manager{
		store: store,
		opts:  opts,
		nodes: make(map[uint64]*node),
		flows: make(map[FlowID]*mAggFlow),
		index: make(map[FlowID]int),
	}
}

// Merge applies a report of node nodeID: it replaces the node's previous
// report whole (an empty value removes all of its flows) and stores it under
// NodeKey(nodeID). Unless Options.DeferAggregateWrite is set, it then writes
// the aggregate under StateKey before it returns, as the seed does. It does
// not retain v.
func (m *Manager) Merge(ctx context.Context, nodeID uint64, v FlowStateValue) (MergeResult, error) {
	if f := m.follow.Load(); f != nil {
		return f.merge(ctx, nodeID, v.Flows())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spare = v.appendFlows(m.spare[:0], m.index)
	return m.mergeLocked(ctx, nodeID, m.spare)
}

// MergeFlows is Merge for a report given as flows sorted by ID, each ID once
// (ErrUnsortedFlows otherwise). Flows with no field present are ignored. It
// does not retain flows. It is the allocation-free path for decoders.
func (m *Manager) MergeFlows(ctx context.Context, nodeID uint64, flows []Flow) (MergeResult, error) {
	for i := 1; i < len(flows); i++ {
		if flows[i].ID <= flows[i-1].ID {
			return MergeResult{}, ErrUnsortedFlows
		}
	}
	if f := m.follow.Load(); f != nil {
		return f.merge(ctx, nodeID, flows)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spare = append(m.spare[:0], flows...)
	return m.mergeLocked(ctx, nodeID, m.spare)
}

// mergeLocked applies incoming, which is m.spare.
func (m *Manager) mergeLocked(ctx context.Context, nodeID uint64, incoming []Flow) (MergeResult, error) {
	incoming = slices.DeleteFunc(incoming, func(f Flow) bool { return f.Has == 0 })
	n := m.nodes[nodeID]
	key := ""
	if n != nil {
		key = n.key
	} else {
		key = NodeKey(nodeID)
	}
	m.buf = AppendJSON(m.buf[:0], incoming)
	rev, err := m.store.Put(ctx, key, m.buf)
	if err != nil {
		return MergeResult{}, fmt.Errorf("flowstate: store report of node %d: %w", nodeID, err)
	}
	if rev.Epoch != m.epoch {
		m.resetLocked(rev.Epoch)
		n = nil
	}
	if n == nil {
		n = &node{key: key}
		m.nodes[nodeID] = n
	}
	changed := m.applyLocked(nodeID, n, incoming)
	if m.override != nil {
		m.override = nil
		changed = true
	}
	if m.rev == 0 {
		// The epoch's first report creates the aggregate, even an empty one:
		// the seed's get turns from None to Some and its key is written.
		changed = true
	}
	// Keep the report, and keep the old slice's memory as the next spare.
	n.flows, m.spare = incoming, n.flows[:0]
	n.seen = m.opts.Now()
	m.rev = rev.Seq
	if changed {
		m.dirty = true
	}
	res := MergeResult{Version: Version{Epoch: m.epoch, Revision: m.rev}, Changed: changed}
	if !m.opts.DeferAggregateWrite {
		if err := m.flushLocked(ctx); err != nil {
			return res, err
		}
	}
	return res, nil
}

// applyLocked moves node n's contributions from its last report, n.flows, to
// incoming (both sorted by ID), sets n.aggs to match incoming and reports
// whether the aggregate changed. It touches only the flows of the two
// reports, and looks up in m.flows only those that n did not report before.
func (m *Manager) applyLocked(nodeID uint64, n *node, incoming []Flow) bool {
	old := n.flows
	aggs := m.spareAggs[:0]
	changed := false
	i, j := 0, 0
	for i < len(old) || j < len(incoming) {
		switch {
		case j == len(incoming) || (i < len(old) && old[i].ID < incoming[j].ID):
			changed = m.removeLocked(nodeID, n.aggs[i]) || changed
			i++
		default:
			var a *mAggFlow
			if i < len(old) && old[i].ID == incoming[j].ID {
				a = n.aggs[i]
				i++
			}
			a, c := m.upsertLocked(nodeID, a, incoming[j])
			aggs = append(aggs, a)
			changed = c || changed
			j++
		}
	}
	clear(n.aggs) // do not keep removed entries alive
	n.aggs, m.spareAggs = aggs, n.aggs[:0]
	return changed
}

// removeLocked removes node's contribution to a.
func (m *Manager) removeLocked(nodeID uint64, a *mAggFlow) bool {
	for k := range a.contribs {
		if a.contribs[k].node == nodeID {
			a.contribs = slices.Delete(a.contribs, k, k+1)
			break
		}
	}
	if len(a.contribs) == 0 {
		delete(m.flows, a.agg.ID)
		m.order = nil
		return true
	}
	return a.recomputeOld()
}

// upsertLocked sets node's contribution to flow f.ID to f and returns the
// flow's entry. a is that entry if the caller knows it, or nil.
func (m *Manager) upsertLocked(nodeID uint64, a *mAggFlow, f Flow) (*mAggFlow, bool) {
	if a == nil {
		a = m.flows[f.ID]
	}
	if a == nil {
		a = &mAggFlow{agg: f}
		a.first[0] = mContrib{node: nodeID, flow: f}
		a.contribs = a.first[:1:1]
		m.flows[f.ID] = a
		m.order = nil
		return a, true
	}
	found := false
	for k := range a.contribs {
		if a.contribs[k].node == nodeID {
			a.contribs[k].flow = f
			found = true
			break
		}
	}
	if !found {
		a.contribs = append(a.contribs, mContrib{node: nodeID, flow: f})
	}
	return a, a.recomputeOld()
}

// recompute sets a.agg to the per-field max over a's contributions and
// reports whether it changed.
func (a *mAggFlow) recomputeOld() bool {
	agg := Flow{ID: a.agg.ID}
	for _, c := range a.contribs {
		f := &c.flow
		if f.Has&HasStateSize != 0 && (agg.Has&HasStateSize == 0 || f.StateSize > agg.StateSize) {
			agg.StateSize = f.StateSize
		}
		if f.Has&HasLastExecTime != 0 && (agg.Has&HasLastExecTime == 0 || f.LastExecTime > agg.LastExecTime) {
			agg.LastExecTime = f.LastExecTime
		}
		if f.Has&HasStartTime != 0 && (agg.Has&HasStartTime == 0 || f.StartTime > agg.StartTime) {
			agg.StartTime = f.StartTime
		}
		agg.Has |= f.Has
	}
	if agg == a.agg {
		return false
	}
	a.agg = agg
	return true
}

// resetLocked forgets everything: the store is at a new epoch.
func (m *Manager) resetLocked(epoch string) {
	m.epoch = epoch
	m.rev = 0
	clear(m.nodes)
	clear(m.flows)
	m.order = nil
	m.override = nil
	m.dirty = false
}

// syncEpochLocked resets the manager if the store has started a new epoch.
func (m *Manager) syncEpochLocked(ctx context.Context) error {
	if f := m.follow.Load(); f != nil {
		return f.checkLocked()
	}
	epoch, err := m.store.Epoch(ctx)
	if err != nil {
		return fmt.Errorf("flowstate: read store epoch: %w", err)
	}
	if epoch != m.epoch {
		m.resetLocked(epoch)
	}
	return nil
}

// appendAggregateLocked appends the current aggregate to dst, sorted by ID.
func (m *Manager) appendAggregateLocked(dst []Flow) []Flow {
	if m.override != nil {
		return append(dst, m.override...)
	}
	if m.order == nil {
		m.order = make([]*mAggFlow, 0, len(m.flows))
		for _, a := range m.flows {
			m.order = append(m.order, a)
		}
		slices.SortFunc(m.order, func(a, b *mAggFlow) int { return cmpID(a.agg.ID, b.agg.ID) })
	}
	for _, a := range m.order {
		dst = append(dst, a.agg)
	}
	return dst
}

// Flush writes the aggregate under StateKey if it has changed since it was
// last written. With Options.DeferAggregateWrite unset, Merge has already
// done so and Flush does nothing. With it set, Flush copies the aggregate
// under the lock but encodes and writes it outside, so that merges do not
// wait for an encoding that grows with the aggregate.
func (m *Manager) Flush(ctx context.Context) error {
	if f := m.follow.Load(); f != nil {
		return f.flush(ctx)
	}
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	m.mu.Lock()
	if !m.dirty || !m.opts.DeferAggregateWrite {
		defer m.mu.Unlock()
		return m.flushLocked(ctx)
	}
	m.flushFlows = m.appendAggregateLocked(m.flushFlows[:0])
	epoch := m.epoch
	m.dirty = false
	m.mu.Unlock()

	m.flushBuf = AppendJSON(m.flushBuf[:0], m.flushFlows)
	rev, err := m.store.Put(ctx, StateKey, m.flushBuf)

	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.dirty = m.dirty || epoch == m.epoch
		return fmt.Errorf("flowstate: store aggregate: %w", err)
	}
	if rev.Epoch != epoch {
		// The store was cleared after the copy: what was just written
		// belongs to nobody in the new epoch.
		if rev.Epoch != m.epoch {
			m.resetLocked(rev.Epoch)
		}
		if _, err := m.store.Delete(ctx, StateKey); err != nil {
			return fmt.Errorf("%w; removing the stale aggregate failed: %w", ErrStoreCleared, err)
		}
		return ErrStoreCleared
	}
	return nil
}

func (m *Manager) flushLocked(ctx context.Context) error {
	if !m.dirty {
		return nil
	}
	m.agg = m.appendAggregateLocked(m.agg[:0])
	m.buf = AppendJSON(m.buf[:0], m.agg)
	rev, err := m.store.Put(ctx, StateKey, m.buf)
	if err != nil {
		return fmt.Errorf("flowstate: store aggregate: %w", err)
	}
	if rev.Epoch != m.epoch {
		// The store was cleared after this epoch's reports were applied:
		// what was just written belongs to nobody in the new epoch.
		m.resetLocked(rev.Epoch)
		if _, err := m.store.Delete(ctx, StateKey); err != nil {
			return fmt.Errorf("%w; removing the stale aggregate failed: %w", ErrStoreCleared, err)
		}
		return ErrStoreCleared
	}
	m.dirty = false
	return nil
}

// Put replaces the aggregate with v and writes it under StateKey, as the
// seed's put does. The next Merge aggregates the nodes' reports again and
// replaces it. Put returns the new version.
func (m *Manager) Put(ctx context.Context, v FlowStateValue) (Version, error) {
	if m.follow.Load() != nil {
		return Version{}, ErrFollowing
	}
	m.flushMu.Lock() // no Flush may write an older aggregate after this one
	defer m.flushMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	flows := v.Flows()
	if flows == nil {
		flows = []Flow{} // an empty value overrides too: override == nil means none
	}
	rev, err := m.store.Put(ctx, StateKey, AppendJSON(nil, flows))
	if err != nil {
		return Version{}, fmt.Errorf("flowstate: store aggregate: %w", err)
	}
	if rev.Epoch != m.epoch {
		m.resetLocked(rev.Epoch)
	}
	m.override = flows
	m.rev = rev.Seq
	m.dirty = false
	return Version{Epoch: m.epoch, Revision: m.rev}, nil
}

// Get returns the aggregate and its version. At revision 0 (nothing merged
// in this epoch, the seed's None) the value is empty.
func (m *Manager) Get(ctx context.Context) (FlowStateValue, Version, error) {
	s, err := m.Snapshot(ctx, nil)
	if err != nil {
		return FlowStateValue{}, Version{}, err
	}
	return s.Value(), s.Version, nil
}

// Snapshot returns the aggregate as flows appended to dst[:0], with its
// version. Its cost is linear in the number of flows of the aggregate.
func (m *Manager) Snapshot(ctx context.Context, dst []Flow) (Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.syncEpochLocked(ctx); err != nil {
		return Snapshot{}, err
	}
	return Snapshot{
		Version: Version{Epoch: m.epoch, Revision: m.rev},
		Flows:   m.appendAggregateLocked(dst[:0]),
	}, nil
}

// Version returns the current version without copying the aggregate.
func (m *Manager) Version(ctx context.Context) (Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.syncEpochLocked(ctx); err != nil {
		return Version{}, err
	}
	return Version{Epoch: m.epoch, Revision: m.rev}, nil
}
