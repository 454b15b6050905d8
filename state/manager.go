package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/kv"

	"github.com/flowstate-io/flowstate/flowstate"
)

// ErrStoreCleared is returned by Merge, Put and Flush when the store was
// cleared while they wrote to it: the write landed in the old epoch and was
// wiped, so the report must be sent again (its node's next heartbeat does).
var ErrStoreCleared = errors.New("flowstate: the store was cleared during the write")

// ErrUnsortedFlows is returned by MergeFlows when its flows are not sorted by
// ID with each ID once.
var ErrUnsortedFlows = errors.New("flowstate: flows are not sorted by id without duplicates")

// MergeResult is what Merge produced.
type MergeResult struct {
	flowstate.Version
	// Changed reports whether the aggregate differs from before the merge.
	Changed bool
	// Applied is when the report was applied (Options.Now, read once per
	// merge): the node's LastReport in Nodes. Zero if nothing was merged.
	Applied time.Time
}

// Snapshot is a copy of the aggregate at one version.
type Snapshot struct {
	flowstate.Version
	// Flows is the aggregate, sorted by ID.
	Flows []flowstate.Flow
}

// Value returns the snapshot's aggregate as a FlowStateValue.
func (s Snapshot) Value() flowstate.FlowStateValue { return flowstate.ValueOf(s.Flows) }

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
	// Limits bound the state: a report that would pass one is refused with
	// a *CapacityError, and nothing is written. Zero: no limit.
	Limits Limits
}

// Manager keeps the aggregate of every node's last report in a kv.Store
// that this process owns, with the seed's semantics. See the package
// documentation for its rules.
type Manager struct {
	store kv.Store
	lazy  lazyStore // store, if it renders values when read; nil otherwise
	opts  Options

	// flushMu serialises the writes of the aggregate key that Flush makes
	// outside mu, and guards flushFlows and flushBuf. Taken before mu.
	flushMu    sync.Mutex
	flushFlows []flowstate.Flow
	flushBuf   []byte
	flushVal   valuePair // the aggregate written lazily, when lazy is set

	// mu serialises every operation, as the seed's merge lock does, and
	// guards all fields below.
	mu        sync.Mutex
	epoch     string               // epoch of the store that agg mirrors; "" before the first look
	rev       uint64               // revision of the last applied write in epoch
	agg       *Aggregate           // every node's last report
	nodes     map[uint64]*nodeMeta // per node of agg: its key and when it reported
	override  []flowstate.Flow     // the value of the last Put, until the next Merge; nil if none
	dirty     bool                 // the aggregate key lags behind the aggregate
	deltaBase uint64               // revision of the last Delta taken in epoch; 0: none
	resync    bool                 // the next Delta must make clients resync

	// Scratch space reused by Merge so that a steady stream of reports does
	// not allocate.
	buf   []byte
	spare []flowstate.Flow
	out   []flowstate.Flow // the aggregate being written by flushLocked
	index map[flowstate.FlowID]int
}

// nodeMeta is what a Manager keeps of a node beside its report.
type nodeMeta struct {
	key  string
	seen time.Time  // when its last report was applied
	val  *valuePair // its key's value, when the store renders values lazily
}

// NewManager returns a Manager that keeps its keys in store. A store that
// renders values when they are read (kv.Memory) is given the node reports
// and the aggregate as flows, so that a write costs a copy, not an encoding.
func NewManager(store kv.Store, opts Options) *Manager {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	lazy, _ := store.(lazyStore)
	return &Manager{
		store: store,
		lazy:  lazy,
		opts:  opts,
		agg:   NewAggregate(),
		nodes: make(map[uint64]*nodeMeta),
		index: make(map[flowstate.FlowID]int),
	}
}

// Merge applies a report of node nodeID: it replaces the node's previous
// report whole (an empty value removes all of its flows) and stores it under
// NodeKey(nodeID). Unless Options.DeferAggregateWrite is set, it then writes
// the aggregate under StateKey before it returns, as the seed does. It does
// not retain v. A report that would take the state past Options.Limits is
// refused with a *CapacityError, before anything is written.
func (m *Manager) Merge(ctx context.Context, nodeID uint64, v flowstate.FlowStateValue) (MergeResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spare = v.AppendFlows(m.spare[:0], m.index)
	return m.mergeLocked(ctx, nodeID, m.spare)
}

// MergeFlows is Merge for a report given as flows sorted by ID, each ID once
// (ErrUnsortedFlows otherwise). Flows with no field present are ignored. It
// does not retain flows. It is the allocation-free path for decoders.
func (m *Manager) MergeFlows(ctx context.Context, nodeID uint64, flows []flowstate.Flow) (MergeResult, error) {
	if err := checkSorted(flows); err != nil {
		return MergeResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mergeLocked(ctx, nodeID, flows)
}

// checkSorted returns ErrUnsortedFlows unless flows are sorted by ID, each
// ID once.
func checkSorted(flows []flowstate.Flow) error {
	for i := 1; i < len(flows); i++ {
		if flows[i].ID <= flows[i-1].ID {
			return ErrUnsortedFlows
		}
	}
	return nil
}

func (m *Manager) mergeLocked(ctx context.Context, nodeID uint64, incoming []flowstate.Flow) (MergeResult, error) {
	// One lookup of the node per report: its aggregate entry holds the
	// Manager's meta (set by every merge that created it).
	n := m.agg.nodes[nodeID]
	if err := m.agg.checkNode(n, incoming, m.opts.Limits); err != nil {
		return MergeResult{}, err
	}
	var meta *nodeMeta
	var val *valuePair
	key := ""
	if n != nil && n.meta != nil {
		meta = n.meta
		key, val = meta.key, meta.val
	} else {
		key = flowstate.NodeKey(nodeID)
	}
	rev, val, err := m.putNodeLocked(ctx, key, val, incoming)
	if err != nil {
		return MergeResult{}, fmt.Errorf("flowstate: store report of node %d: %w", nodeID, err)
	}
	if rev.Epoch != m.epoch {
		m.resetLocked(rev.Epoch)
		meta, n = nil, nil
	}
	if meta == nil {
		meta = &nodeMeta{key: key, val: val}
		m.nodes[nodeID] = meta
	}
	n, changed := m.agg.applyNode(nodeID, n, incoming)
	n.meta = meta
	if m.override != nil {
		m.override, m.resync = nil, true
		changed = true
	}
	if m.rev == 0 {
		// The epoch's first report creates the aggregate, even an empty one:
		// the seed's get turns from None to Some and its key is written.
		changed = true
	}
	meta.seen = m.opts.Now()
	m.rev = rev.Seq
	if changed {
		m.dirty = true
	}
	res := MergeResult{Version: flowstate.Version{Epoch: m.epoch, Revision: m.rev}, Changed: changed, Applied: meta.seen}
	if !m.opts.DeferAggregateWrite {
		if err := m.flushLocked(ctx); err != nil {
			return res, err
		}
	}
	return res, nil
}

// resetLocked forgets everything: the store is at a new epoch.
func (m *Manager) resetLocked(epoch string) {
	m.epoch = epoch
	m.rev = 0
	m.agg.Reset()
	clear(m.nodes)
	m.override = nil
	m.dirty = false
	m.deltaBase, m.resync = 0, false
}

// syncEpochLocked resets the manager if the store has started a new epoch.
func (m *Manager) syncEpochLocked(ctx context.Context) error {
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
func (m *Manager) appendAggregateLocked(dst []flowstate.Flow) []flowstate.Flow {
	if m.override != nil {
		return append(dst, m.override...)
	}
	return m.agg.AppendFlows(dst)
}

// Flush writes the aggregate under StateKey if it has changed since it was
// last written. With Options.DeferAggregateWrite unset, Merge has already
// done so and Flush does nothing. With it set, Flush copies the aggregate
// under the lock but encodes and writes it outside, so that merges do not
// wait for an encoding that grows with the aggregate.
func (m *Manager) Flush(ctx context.Context) error {
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

	var rev kv.Revision
	var err error
	if m.lazy != nil {
		// The copy is the value: it is rendered if someone reads the key.
		rev, err = m.flushVal.put(ctx, m.lazy, flowstate.StateKey, m.flushFlows)
	} else {
		m.flushBuf = flowstate.AppendJSON(m.flushBuf[:0], m.flushFlows)
		rev, err = m.store.Put(ctx, flowstate.StateKey, m.flushBuf)
	}

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
		return m.deleteStaleLocked(ctx)
	}
	return nil
}

func (m *Manager) flushLocked(ctx context.Context) error {
	if !m.dirty {
		return nil
	}
	m.out = m.appendAggregateLocked(m.out[:0])
	m.buf = flowstate.AppendJSON(m.buf[:0], m.out)
	rev, err := m.store.Put(ctx, flowstate.StateKey, m.buf)
	if err != nil {
		return fmt.Errorf("flowstate: store aggregate: %w", err)
	}
	if rev.Epoch != m.epoch {
		// The store was cleared after this epoch's reports were applied:
		// what was just written belongs to nobody in the new epoch.
		m.resetLocked(rev.Epoch)
		return m.deleteStaleLocked(ctx)
	}
	m.dirty = false
	return nil
}

// deleteStaleLocked removes an aggregate written into a new epoch, and
// returns ErrStoreCleared.
func (m *Manager) deleteStaleLocked(ctx context.Context) error {
	if _, err := m.store.Delete(ctx, flowstate.StateKey); err != nil {
		return fmt.Errorf("%w; removing the stale aggregate failed: %w", ErrStoreCleared, err)
	}
	return ErrStoreCleared
}

// Put replaces the aggregate with v and writes it under StateKey, as the
// seed's put does. The next Merge aggregates the nodes' reports again and
// replaces it. Put returns the new version.
func (m *Manager) Put(ctx context.Context, v flowstate.FlowStateValue) (flowstate.Version, error) {
	m.flushMu.Lock() // no Flush may write an older aggregate after this one
	defer m.flushMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	flows := v.Flows()
	if flows == nil {
		flows = []flowstate.Flow{} // an empty value overrides too: override == nil means none
	}
	rev, err := m.store.Put(ctx, flowstate.StateKey, flowstate.AppendJSON(nil, flows))
	if err != nil {
		return flowstate.Version{}, fmt.Errorf("flowstate: store aggregate: %w", err)
	}
	if rev.Epoch != m.epoch {
		m.resetLocked(rev.Epoch)
	}
	m.override, m.resync = flows, true
	m.rev = rev.Seq
	m.dirty = false
	return flowstate.Version{Epoch: m.epoch, Revision: m.rev}, nil
}

// Get returns the aggregate and its version. At revision 0 (nothing merged
// in this epoch, the seed's None) the value is empty.
func (m *Manager) Get(ctx context.Context) (flowstate.FlowStateValue, flowstate.Version, error) {
	s, err := m.Snapshot(ctx, nil)
	if err != nil {
		return flowstate.FlowStateValue{}, flowstate.Version{}, err
	}
	return s.Value(), s.Version, nil
}

// Snapshot returns the aggregate as flows appended to dst[:0], with its
// version. Its cost is linear in the number of flows of the aggregate.
func (m *Manager) Snapshot(ctx context.Context, dst []flowstate.Flow) (Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.syncEpochLocked(ctx); err != nil {
		return Snapshot{}, err
	}
	return Snapshot{
		Version: flowstate.Version{Epoch: m.epoch, Revision: m.rev},
		Flows:   m.appendAggregateLocked(dst[:0]),
	}, nil
}

// Version returns the current version without copying the aggregate.
func (m *Manager) Version(ctx context.Context) (flowstate.Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.syncEpochLocked(ctx); err != nil {
		return flowstate.Version{}, err
	}
	return flowstate.Version{Epoch: m.epoch, Revision: m.rev}, nil
}

// Sync does nothing: the Manager's state is its store's. It is there so
// that a Manager and a Replica serve the same interface.
func (m *Manager) Sync(context.Context) error { return nil }

// Loaded reports true: a Manager's state is always served.
func (m *Manager) Loaded() bool { return true }
