package state

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// ErrUnsortedFlows is returned by Merge and Submit when the flows of a
// report are not sorted by ID with each ID once.
var ErrUnsortedFlows = errors.New("state: flows are not sorted by id without duplicates")

// MergeResult is what applying a report produced.
type MergeResult struct {
	flowstate.Version
	// Changed reports whether the aggregate differs from before the report.
	Changed bool
	// Applied is when the report was applied (Options.Now, read once per
	// report): the node's LastReport in Nodes. Zero if nothing was applied,
	// and on a Replica.
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

// Options configure a Manager. The zero value is GreptimeDB's behaviour.
type Options struct {
	// Now tells the time of a report, for Nodes and EvictSilent; nil means
	// time.Now.
	Now func() time.Time
	// Limits bound the state: a report that would pass one is refused with
	// a *CapacityError, and nothing changes. Zero: no limit.
	Limits Limits
}

// Manager is the state of one worker that alone holds it: GreptimeDB's
// FlowStateManager on its in-memory KV, without the KV: the aggregate is the
// state. See the package documentation for its rules.
type Manager struct {
	opts Options

	// mu serialises every operation, as GreptimeDB's merge lock does, and
	// guards all fields below.
	mu        sync.Mutex
	epoch     string // "" never: a new Manager starts an epoch
	seq       uint64 // the last revision given, in any epoch: revisions keep growing across epochs
	rev       uint64 // revision of the state in epoch; 0: nothing applied since the epoch began
	agg       *Aggregate
	deltaBase uint64 // revision of the last Delta taken in epoch; 0: none
	// errors is the errors the nodes' health holds: their bytes and
	// number.
	errors errorLoad
}

// nodeMeta is what a Manager keeps of a node beside its report.
type nodeMeta struct {
	seen time.Time // when its last report was applied
	// nodeEpoch is its last report's node_epoch, if hasNodeEpoch.
	nodeEpoch    uint64
	hasNodeEpoch bool
	lineage      lineage // its processes, for the stale rule
	// health is its flows' health (nil: none), in one of bufs; the next
	// report's health is copied into the other, so that the aggregate
	// compares the two lists and a report allocates nothing once the
	// buffers have grown. A reader copies health under the lock.
	health *flowstate.Health
	bufs   [2]healthBuf
	// errors is health's errors: counted once, when the report is taken,
	// not again from cold memory at the next one.
	errors errorLoad
}

// spare returns the buffer that health is not in.
func (m *nodeMeta) spare() *healthBuf {
	if m.health == &m.bufs[0].h {
		return &m.bufs[1]
	}
	return &m.bufs[0]
}

// dropSpare lets go of the messages of the buffers health is not in (both
// when health is nil): no copy of an error outlives the state's holding
// it.
func (m *nodeMeta) dropSpare() {
	for i := range m.bufs {
		if m.health != &m.bufs[i].h {
			m.bufs[i].drop(m.health)
		}
	}
}

// NewManager returns an empty Manager at a new epoch.
func NewManager(opts Options) *Manager {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Manager{opts: opts, epoch: kv.NewEpoch(), agg: NewAggregate()}
}

// Merge applies a node's report, whose flows, and its health's, are sorted
// by ID, each ID once (ErrUnsortedFlows otherwise): it replaces the node's previous report
// whole (an empty report removes all of its flows). Flows with no field
// present are ignored. A stale report (a *StaleError: not newer than the
// node's held report of the same process, or of a process the node moved
// away from) is refused, and so is one that would take the state past
// Options.Limits (a *CapacityError); nothing changes then. It
// does not retain the report's flows and does not allocate in steady state.
func (m *Manager) Merge(_ context.Context, rep Report) (MergeResult, error) {
	nodeID, flows := rep.Node, rep.Flows
	m.mu.Lock()
	defer m.mu.Unlock()
	// One lookup of the node per report: its aggregate entry holds the
	// Manager's meta.
	n := m.agg.nodes[nodeID]
	var meta *nodeMeta
	var held *lineage
	var oldErrors errorLoad
	if n != nil {
		meta = n.meta
	}
	if meta != nil {
		held, oldErrors = &meta.lineage, meta.errors
	}
	health, err := m.agg.admit(&rep, held, n, m.errors, oldErrors, m.opts.Limits)
	if err != nil {
		return MergeResult{}, err
	}
	if meta == nil {
		meta = &nodeMeta{}
	}
	newErrors := loadOf(health)
	kept := meta.spare().keep(health)
	m.errors = m.errors.plus(newErrors).minus(oldErrors)
	next := held.after(&rep)
	n, changed := m.agg.applyNode(nodeID, n, flows, healthFlows(kept))
	n.meta = meta
	meta.lineage, meta.health, meta.errors = next, kept, newErrors
	meta.nodeEpoch, meta.hasNodeEpoch = rep.NodeEpoch, rep.HasNodeEpoch
	meta.dropSpare() // the health the report replaced: nothing reads it now
	if m.rev == 0 {
		// The epoch's first report creates the aggregate, even an empty one:
		// GreptimeDB's get turns from None to Some and its key is written.
		changed = true
	}
	n.meta.seen = m.opts.Now()
	m.seq++
	m.rev = m.seq
	return MergeResult{Version: m.versionLocked(), Changed: changed, Applied: n.meta.seen}, nil
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

func (m *Manager) versionLocked() flowstate.Version {
	return flowstate.Version{Epoch: m.epoch, Revision: m.rev}
}

// Snapshot returns the aggregate as flows appended to dst[:0], with its
// version. At revision 0 (nothing applied in this epoch, GreptimeDB's None)
// it is empty. Its cost is linear in the number of flows of the aggregate.
func (m *Manager) Snapshot(_ context.Context, dst []flowstate.Flow) (Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Snapshot{Version: m.versionLocked(), Flows: m.agg.AppendFlows(dst[:0])}, nil
}

// Version returns the current version without copying the aggregate.
func (m *Manager) Version(context.Context) (flowstate.Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.versionLocked(), nil
}

// Delta returns what changed in the aggregate since the previous Delta of
// this epoch, with dst's memory: the cost grows with the number of flows
// that changed. It asks clients to resync when more than half the aggregate
// (at least 1,024 flows) changed.
func (m *Manager) Delta(_ context.Context, dst []flowstate.Flow) (Delta, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := Delta{Version: m.versionLocked(), Base: m.deltaBase}
	takeDelta(m.agg, &d, dst, false)
	m.deltaBase = m.rev
	return d, nil
}

// Nodes returns the nodes whose reports make up the aggregate, by ID, with
// the version of the state. It holds the lock only to copy them.
func (m *Manager) Nodes(context.Context) ([]NodeInfo, flowstate.Version, error) {
	m.mu.Lock()
	out := copyNodes(m.agg, func(n *NodeInfo) {
		meta := m.agg.nodes[n.ID].meta
		n.LastReport, n.NodeEpoch, n.HasNodeEpoch = meta.seen, meta.nodeEpoch, meta.hasNodeEpoch
	})
	v := m.versionLocked()
	m.mu.Unlock()
	sortNodes(out)
	return out, v, nil
}

// Size returns the number of nodes and of flows in the aggregate.
func (m *Manager) Size() (nodes, flows int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.agg.Len()
}

// ErrorBytes returns the bytes of error messages the nodes' health holds,
// as Limits.MaxErrorBytes counts them.
func (m *Manager) ErrorBytes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.errors.bytes
}

// Errors returns the number of errors the nodes' health holds, as
// Limits.MaxErrors counts them.
func (m *Manager) Errors() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.errors.count
}

// EvictSilent removes every node whose last report was applied before
// cutoff, as if its key were deleted: a node that stopped reporting no
// longer holds its flows in the aggregate. Each eviction takes a revision.
// It returns the evicted nodes and the result of the last eviction.
func (m *Manager) EvictSilent(_ context.Context, cutoff time.Time) ([]uint64, MergeResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var evicted []uint64
	res := MergeResult{Version: m.versionLocked()}
	for id, n := range m.agg.nodes {
		if !n.meta.seen.Before(cutoff) {
			continue
		}
		m.errors = m.errors.minus(n.meta.errors)
		if m.agg.Remove(id) {
			res.Changed = true
		}
		m.seq++
		m.rev = m.seq
		res.Revision = m.rev
		evicted = append(evicted, id)
	}
	return evicted, res, nil
}
