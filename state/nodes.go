package state

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flowstate-io/flowstate/kv"

	"github.com/flowstate-io/flowstate/flowstate"
)

// NodeInfo describes one node whose report is part of the aggregate.
type NodeInfo struct {
	ID         uint64
	LastReport time.Time // when its last report was applied (Options.Now)
	Flows      int       // flows in its last report
}

// copyNodes copies agg's nodes, with the time of each one's last report,
// unsorted: the caller holds its lock for this copy only.
func copyNodes(agg *Aggregate, seen func(id uint64) time.Time) []NodeInfo {
	n, _ := agg.Len()
	out := make([]NodeInfo, 0, n)
	for id, flows := range agg.Nodes() {
		out = append(out, NodeInfo{ID: id, LastReport: seen(id), Flows: flows})
	}
	return out
}

// sortNodes sorts nodes by ID.
func sortNodes(nodes []NodeInfo) {
	slices.SortFunc(nodes, func(a, b NodeInfo) int { return cmp.Compare(a.ID, b.ID) })
}

// Nodes returns the nodes whose reports make up the aggregate, by ID, with
// the version of the state. It holds the lock only to copy them.
func (m *Manager) Nodes(ctx context.Context) ([]NodeInfo, flowstate.Version, error) {
	m.mu.Lock()
	if err := m.syncEpochLocked(ctx); err != nil {
		m.mu.Unlock()
		return nil, flowstate.Version{}, err
	}
	out := copyNodes(m.agg, func(id uint64) time.Time { return m.nodes[id].seen })
	v := flowstate.Version{Epoch: m.epoch, Revision: m.rev}
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

// EvictSilent removes every node whose last report was applied before
// cutoff, as if it had sent an empty report, and deletes its key: a node
// that stopped reporting no longer holds its flows in the aggregate. It
// returns the evicted nodes and the result of the last eviction.
func (m *Manager) EvictSilent(ctx context.Context, cutoff time.Time) ([]uint64, MergeResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.syncEpochLocked(ctx); err != nil {
		return nil, MergeResult{}, err
	}
	var evicted []uint64
	res := MergeResult{Version: flowstate.Version{Epoch: m.epoch, Revision: m.rev}}
	for id, meta := range m.nodes {
		if !meta.seen.Before(cutoff) {
			continue
		}
		rev, err := m.store.Delete(ctx, meta.key)
		if err != nil {
			return evicted, res, fmt.Errorf("flowstate: evict node %d: %w", id, err)
		}
		if rev.Epoch != m.epoch {
			m.resetLocked(rev.Epoch) // the store was cleared: nothing left to evict
			return evicted, MergeResult{Version: flowstate.Version{Epoch: m.epoch}}, nil
		}
		if m.agg.Remove(id) || m.override != nil {
			m.override, m.resync = nil, m.resync || m.override != nil
			m.dirty = true
			res.Changed = true
		}
		delete(m.nodes, id)
		m.rev = rev.Seq
		res.Revision = m.rev
		evicted = append(evicted, id)
	}
	if len(evicted) > 0 && !m.opts.DeferAggregateWrite {
		if err := m.flushLocked(ctx); err != nil {
			return evicted, res, err
		}
	}
	return evicted, res, nil
}

// lazyStore is a store that takes values rendered when they are read
// (kv.Memory).
type lazyStore interface {
	PutLazy(ctx context.Context, key string, v kv.Renderer) (kv.Revision, error)
}

// flowsValue is a stored value kept as flows: it renders their JSON
// (AppendJSON) when the store's key is read.
type flowsValue struct{ flows []flowstate.Flow }

// AppendValue implements kv.Renderer.
func (v *flowsValue) AppendValue(dst []byte) []byte { return flowstate.AppendJSON(dst, v.flows) }

// valuePair is one key's value written lazily: two flowsValues, the store
// holding at most one of them, so that the next write fills the other
// without a race with the store's readers and without allocating. Its
// writer serialises the writes of the key.
type valuePair struct {
	vals [2]flowsValue
	next int // the value that the store does not hold
}

// put copies flows into the value that the store does not hold and writes
// it under key. A failed write leaves the store's value as it was.
func (p *valuePair) put(ctx context.Context, store lazyStore, key string, flows []flowstate.Flow) (kv.Revision, error) {
	v := &p.vals[p.next]
	v.flows = append(v.flows[:0], flows...)
	rev, err := store.PutLazy(ctx, key, v)
	if err != nil {
		return rev, err
	}
	p.next ^= 1
	return rev, nil
}

// putNodeLocked writes a node's report under its key: as flows, in val
// (made if nil), if the store renders values when read, or encoded.
func (m *Manager) putNodeLocked(ctx context.Context, key string, val *valuePair, flows []flowstate.Flow) (kv.Revision, *valuePair, error) {
	if m.lazy == nil {
		m.buf = flowstate.AppendJSON(m.buf[:0], flows)
		rev, err := m.store.Put(ctx, key, m.buf)
		return rev, nil, err
	}
	if val == nil {
		val = new(valuePair)
	}
	rev, err := val.put(ctx, m.lazy, key, flows)
	return rev, val, err
}
