package state

import (
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// Clear forgets every report and starts a new epoch, as a metasrv leader
// change resets GreptimeDB's in-memory KV: no report from before it
// reappears, and the state is at revision 0 (no value) until the next
// report. Revisions keep growing across it. The worker never clears a
// Manager; the tests use it to model that reset.
func (m *Manager) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch = kv.NewEpoch()
	m.rev, m.deltaBase = 0, 0
	m.agg.Reset()
}

// Dump renders the KV GreptimeDB would hold for the state: every node's
// last report under NodeKey(id) and, once a report was applied in this
// epoch, the aggregate under StateKey, each in its exact stored bytes
// (flowstate.AppendJSON). The tests compare it with a model.
func (m *Manager) Dump() map[string][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]byte, len(m.agg.nodes)+1)
	for id, flows := range m.agg.Nodes() {
		out[flowstate.NodeKey(id)] = flowstate.AppendJSON(nil, flows)
	}
	if m.rev != 0 {
		out[flowstate.StateKey] = flowstate.AppendJSON(nil, m.agg.AppendFlows(nil))
	}
	return out
}
