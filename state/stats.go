package state

import (
	"context"
	"fmt"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// Stats is the flow stats of the state at one version (PROTOCOL.md v3, the
// stats view): its aggregate, and per flow the health over every node that
// reports it (flowstate.MergeHealth).
type Stats struct {
	flowstate.Version
	// Flows is the aggregate, sorted by ID.
	Flows []flowstate.Flow
	// Health is each flow's health over the nodes, sorted by ID.
	Health []flowstate.FlowStats
	// Nodes is the health of each node that holds some, in no order, with
	// the process that reported it: what Health merges. The Healths may be
	// the state's own and must not be changed.
	Nodes []NodeHealth
}

// NodeHealth is one node's health, with the node_epoch of the report that
// carried it (HasNodeEpoch false: the report carried none).
type NodeHealth struct {
	flowstate.NodeHealth
	NodeEpoch    uint64
	HasNodeEpoch bool
}

// appendHealths appends the health each node of nodes holds, with its
// lineage. A Replica's is never changed once kept (a new report replaces
// it whole), so the merge may read it once the lock is let go; a
// Manager's next reports reuse its buffers, so it is copied under the
// lock (copyHealths).
func appendHealths[T any](dst []NodeHealth, nodes map[uint64]T, health func(T) (*flowstate.Health, lineage)) []NodeHealth {
	for id, n := range nodes {
		if h, l := health(n); h != nil {
			dst = append(dst, NodeHealth{NodeHealth: flowstate.NodeHealth{NodeID: id, Health: h}, NodeEpoch: l.epoch, HasNodeEpoch: l.hasEpoch})
		}
	}
	return dst
}

// mergeHealth sets s.Health from s.Nodes.
func (s *Stats) mergeHealth() {
	nodes := make([]flowstate.NodeHealth, len(s.Nodes))
	for i := range s.Nodes {
		nodes[i] = s.Nodes[i].NodeHealth
	}
	s.Health = flowstate.MergeHealth(nil, nodes)
}

// copyHealths gives each of nodes a copy of its Health, all in three
// arrays: the Healths, their flows and the flows' errors.
func copyHealths(nodes []NodeHealth) {
	nf, ne := 0, 0
	for i := range nodes {
		nf += len(nodes[i].Health.Flows)
		ne += flowstate.ErrorCount(nodes[i].Health.Flows)
	}
	hs := make([]flowstate.Health, len(nodes))
	flows := make([]flowstate.FlowHealth, 0, nf)
	errs := make([]flowstate.FlowError, 0, ne)
	for i := range nodes {
		k := len(flows)
		flows, errs = flowstate.AppendFlowHealth(flows, errs, nodes[i].Health.Flows)
		hs[i] = *nodes[i].Health
		hs[i].Flows, hs[i].RetiredEpochs = flows[k:len(flows):len(flows)], nil
		nodes[i].Health = &hs[i]
	}
}

// healthBuf holds a copy of a report's health in buffers it reuses from
// one report to the next.
type healthBuf struct {
	h    flowstate.Health
	errs []flowstate.FlowError // the array behind h's flows' LastErrors
}

// keep copies into b what a state keeps of h (keepHealth) and returns it,
// or nil when h holds no flow's health. What b held before is gone.
func (b *healthBuf) keep(h *flowstate.Health) *flowstate.Health {
	if h == nil || len(h.Flows) == 0 {
		b.release()
		return nil
	}
	clear(b.errs) // no message outlives its report here
	flows, errs := flowstate.AppendFlowHealth(b.h.Flows[:0], b.errs[:0], h.Flows)
	b.h = flowstate.Health{HasProcessedRows: h.HasProcessedRows, HasLastErrors: h.HasLastErrors, HasSeq: h.HasSeq, Seq: h.Seq, Flows: flows}
	b.errs = errs
	return &b.h
}

// drop lets go of the messages b holds, keeping its arrays for the next
// report of a similar size: a state that no longer holds b's health holds
// none of its text. Arrays more than twice what the held health, in,
// needs are let go too, so that a node's buffers never stay larger than
// what it holds for long.
func (b *healthBuf) drop(in *flowstate.Health) {
	clear(b.errs)
	b.errs = b.errs[:0]
	clear(b.h.Flows)
	b.h.Flows = b.h.Flows[:0]
	if in == nil || cap(b.errs) > 2*flowstate.ErrorCount(in.Flows) || cap(b.h.Flows) > 2*len(in.Flows) {
		b.release()
	}
}

// release lets go of everything b holds.
func (b *healthBuf) release() {
	*b = healthBuf{}
}

// keepHealth returns what a state keeps of a report's v3 part: a copy
// without its seq and retired epochs, nor the flows it names only by an
// empty error array (named nowhere), or nil when it holds no flow's
// health.
func keepHealth(h *flowstate.Health) *flowstate.Health {
	h = h.WithoutUnnamed()
	if h == nil || len(h.Flows) == 0 {
		return nil
	}
	c := h.Clone()
	c.RetiredEpochs = nil
	return c
}

// Stats returns the flow stats: the aggregate and its health, at one
// version. It holds the lock to copy the aggregate and the nodes' health;
// the merge runs outside it.
func (m *Manager) Stats(context.Context) (Stats, error) {
	m.mu.Lock()
	s := Stats{Version: m.versionLocked(), Flows: m.agg.AppendFlows(nil)}
	s.Nodes = appendHealths(nil, m.agg.nodes, func(n *aggNode) (*flowstate.Health, lineage) {
		if n.meta == nil {
			return nil, lineage{}
		}
		return n.meta.health, n.meta.lineage
	})
	copyHealths(s.Nodes) // the next reports reuse the nodes' buffers
	m.mu.Unlock()
	s.mergeHealth()
	return s, nil
}

// Stats returns the flow stats of the served state. While the served state
// is a frozen copy (the watch catches up with it), the nodes' health is not
// the frozen state's: it answers unavailable then.
func (r *Replica) Stats(context.Context) (Stats, error) {
	r.mu.Lock()
	if err := r.checkLocked(); err != nil {
		r.mu.Unlock()
		return Stats{}, err
	}
	if r.phase == frozen {
		r.mu.Unlock()
		return Stats{}, fmt.Errorf("state: the watch is catching up with the served state: %w", kv.ErrUnavailable)
	}
	s := Stats{Version: r.versionLocked(), Flows: r.appendServedLocked(nil)}
	s.Nodes = appendHealths(nil, r.watch.nodes, func(n nodeSeen) (*flowstate.Health, lineage) { return n.health, n.lineage })
	r.mu.Unlock()
	s.mergeHealth()
	return s, nil
}

// keepHealthOf is the part of rep's health that a state keeps and counts
// against the limits, without copying it unless rep names a flow only by
// an empty error array (such a flow is named nowhere): nil when it holds
// no flow's health.
func keepHealthOf(rep *Report) *flowstate.Health {
	h := rep.Health.WithoutUnnamed()
	if h == nil || len(h.Flows) == 0 {
		return nil
	}
	return h
}
