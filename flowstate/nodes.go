package flowstate

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// NodeInfo describes one node whose report is part of the aggregate.
type NodeInfo struct {
	ID         uint64
	LastReport time.Time // when its last report was applied (Options.Now)
	Flows      int       // flows in its last report
}

// Nodes returns the nodes whose reports make up the aggregate, by ID, with
// the version of the state.
func (m *Manager) Nodes(ctx context.Context) ([]NodeInfo, Version, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.syncEpochLocked(ctx); err != nil {
		return nil, Version{}, err
	}
	out := make([]NodeInfo, 0, len(m.nodes))
	for id, n := range m.nodes {
		out = append(out, NodeInfo{ID: id, LastReport: n.seen, Flows: len(n.flows)})
	}
	slices.SortFunc(out, func(a, b NodeInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, Version{Epoch: m.epoch, Revision: m.rev}, nil
}

// Size returns the number of nodes and of flows in the aggregate.
func (m *Manager) Size() (nodes, flows int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.nodes), len(m.flows)
}

// EvictSilent removes every node whose last report was applied before
// cutoff, as if it had sent an empty report, and deletes its key: a node
// that stopped reporting no longer holds its flows in the aggregate. It
// returns the evicted nodes and the result of the last eviction.
func (m *Manager) EvictSilent(ctx context.Context, cutoff time.Time) ([]uint64, MergeResult, error) {
	if f := m.follow.Load(); f != nil {
		return f.evict(ctx, cutoff)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.syncEpochLocked(ctx); err != nil {
		return nil, MergeResult{}, err
	}
	var evicted []uint64
	res := MergeResult{Version: Version{Epoch: m.epoch, Revision: m.rev}}
	for id, n := range m.nodes {
		if !n.seen.Before(cutoff) {
			continue
		}
		rev, err := m.store.Delete(ctx, n.key)
		if err != nil {
			return evicted, res, fmt.Errorf("flowstate: evict node %d: %w", id, err)
		}
		if rev.Epoch != m.epoch {
			m.resetLocked(rev.Epoch) // the store was cleared: nothing left to evict
			return evicted, MergeResult{Version: Version{Epoch: m.epoch}}, nil
		}
		if m.applyLocked(id, n, nil) || m.override != nil {
			m.override = nil
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
