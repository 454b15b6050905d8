package state_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// ruleMaxFlows is --max-flows in the tests of the store rule.
const ruleMaxFlows = 3

// hostile is a write to the store by someone other than a worker, and what
// the rule makes of the node it names.
type hostile struct {
	name  string
	key   string // the key written; NodeKey(hostileNode) if empty
	value []byte // the value put; nil: a deletion
	// want is node hostileNode's value by the rule once the write is
	// applied: nil for no value (the node is absent).
	want flowstate.FlowStateValue
	// reason is what StoreRefusals counts, "" for nothing.
	reason string
}

// hostileNode is the node whose key the hostile writes hit: it reported
// before, as a worker writes.
const hostileNode = 70

// hostileValues are the writes an operator's `nats kv put` or a bug can
// make, each applied by the rule.
func hostileValues() []hostile {
	foreign := lastExecOf(99, 7, 8)
	return []hostile{
		{name: "garbage", value: []byte("not json at all"), reason: state.RefusedInvalid},
		{name: "wrong shape", value: []byte(`{"state_size":{"1":"12"},"last_exec_time_map":{}}`), reason: state.RefusedInvalid},
		{name: "a field twice", value: []byte(`{"state_size":{},"state_size":{},"last_exec_time_map":{}}`), reason: state.RefusedInvalid},
		{name: "1 MB of junk", value: bytes.Repeat([]byte("{"), 1<<20), reason: state.RefusedInvalid},
		{name: "an odd key", key: flowstate.NodeKeyPrefix + "0070", value: encode(foreign),
			want: lastExecOf(hostileNode, 1), reason: state.RefusedKey},
		{name: "a deleted key"},
		{name: "a foreign valid value", value: encode(foreign), want: foreign},
	}
}

// TestReplicaAppliesTheStoreByOneRuleLiveAndLoaded writes each hostile
// value while reports flow; a replica that follows the store live and one
// that loads it afterwards (a restarted worker) hold one state at one
// revision, the rule's, and count what the rule refused.
func TestReplicaAppliesTheStoreByOneRuleLiveAndLoaded(t *testing.T) {
	opts := state.ReplicaOptions{MaxReportFlows: ruleMaxFlows}
	for _, h := range hostileValues() {
		t.Run(h.name, func(t *testing.T) {
			mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
			live := follow(t, mem, opts)
			fmerge(t, live.mgr, 1, lastExecOf(1, 1, 2))
			fmerge(t, live.mgr, hostileNode, lastExecOf(hostileNode, 1))
			key := h.key
			if key == "" {
				key = flowstate.NodeKey(hostileNode)
			}
			var err error
			if h.value == nil {
				_, err = mem.Delete(t.Context(), key)
			} else {
				_, err = mem.Put(t.Context(), key, h.value)
			}
			require.NoError(t, err)
			fmerge(t, live.mgr, 2, lastExecOf(2, 3))

			want := lastExecOf(1, 1, 2)
			want.LastExecTimeMap[3] = 2003
			for id, ts := range h.want.LastExecTimeMap {
				want.LastExecTimeMap[id] = max(want.LastExecTimeMap[id], ts)
			}
			got, version := live.synced(t)
			assert.True(t, want.Equal(got), "live: got %v, want %v", got, want)
			loaded := follow(t, mem, opts)
			again, againVersion := loaded.synced(t)
			assert.True(t, got.Equal(again), "loaded: %v, live: %v", again, got)
			assert.Equal(t, version, againVersion, "one state at one revision")
			for name, w := range map[string]*worker{"live": live, "loaded": loaded} {
				want := map[string]uint64{}
				if h.reason != "" {
					want[h.reason] = 1
				}
				assert.Equal(t, want, w.mgr.StoreRefusals(), name)
			}
		})
	}
}

// TestReplicaRefusesAReportPastMaxFlowsBeforeItsWrite: --max-flows is
// checked before the write, so that no worker writes what the rule refuses.
func TestReplicaRefusesAReportPastMaxFlowsBeforeItsWrite(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{MaxReportFlows: ruleMaxFlows})
	_, err := w.mgr.Merge(t.Context(), state.Report{Node: 1, Flows: lastExecOf(1, 1, 2, 3, 4).Flows()})
	require.ErrorIs(t, err, state.ErrTooManyFlows)
	_, err = mem.Get(t.Context(), flowstate.NodeKey(1))
	assert.ErrorIs(t, err, kv.ErrNotFound, "nothing written")
	fmerge(t, w.mgr, 1, lastExecOf(1, 1, 2, 3))
}

// TestReplicaServesAStatePastItsLimitsAndRefusesGrowth: values written from
// outside may take the state past --max-nodes and --max-total-flows; it is
// served as it is, and a report that would add a node or a flow is refused
// (507) until the state is back within the limits, while one that adds
// neither passes.
func TestReplicaServesAStatePastItsLimitsAndRefusesGrowth(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w := follow(t, mem, state.ReplicaOptions{Limits: state.Limits{MaxNodes: 2, MaxFlows: 4}})
	for node := uint64(1); node <= 3; node++ {
		_, err := mem.Put(t.Context(), flowstate.NodeKey(node), encode(lastExecOf(node, flowstate.FlowID(2*node), flowstate.FlowID(2*node+1))))
		require.NoError(t, err)
	}
	got, _ := w.synced(t)
	assert.Len(t, got.LastExecTimeMap, 6, "served as it is: 3 nodes, 6 flows")

	_, err := w.mgr.Merge(t.Context(), state.Report{Node: 4, Flows: nil})
	var ce *state.CapacityError
	require.ErrorAs(t, err, &ce, "a new node")
	assert.Equal(t, state.LimitMaxNodes, ce.Limit)
	_, err = w.mgr.Merge(t.Context(), state.Report{Node: 1, Flows: lastExecOf(1, 2, 3, 20).Flows()})
	require.ErrorAs(t, err, &ce, "a new flow")
	assert.Equal(t, state.LimitMaxTotalFlows, ce.Limit)
	assert.Contains(t, err.Error(), "7 flows")
	fmerge(t, w.mgr, 1, lastExecOf(1, 2)) // fewer flows: passes
	fmerge(t, w.mgr, 2, lastExecOf(2, 4, 5))
	_, err = mem.Delete(t.Context(), flowstate.NodeKey(3))
	require.NoError(t, err)
	w.synced(t)
	fmerge(t, w.mgr, 1, lastExecOf(1, 2, 3)) // back within the limits: 4 flows
}

// TestReplicaDeletesTheAggregateKeyWhileItDoesNotFit: the publisher never
// leaves an older value under the aggregate key: while the aggregate's JSON
// does not fit one value of the store the key is deleted, and it is
// written again, with the current aggregate, as soon as it fits.
func TestReplicaDeletesTheAggregateKeyWhileItDoesNotFit(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{MaxValue: 100})
	w := follow(t, mem, state.ReplicaOptions{})
	require.Eventually(t, w.mgr.Publisher, followWait, time.Millisecond, "the only replica becomes the publisher")
	small := lastExecOf(1, 1)
	fmerge(t, w.mgr, 1, small)
	require.NoError(t, w.mgr.Flush(t.Context()))
	e, err := mem.Get(t.Context(), flowstate.StateKey)
	require.NoError(t, err)
	assert.Equal(t, string(encode(small)), string(e.Value))

	for node := uint64(2); node <= 4; node++ { // each report fits, the aggregate does not
		fmerge(t, w.mgr, node, lastExecOf(node, flowstate.FlowID(10*node), flowstate.FlowID(10*node+1)))
	}
	require.NoError(t, w.mgr.Flush(t.Context()), "not an error: the key is deleted")
	_, err = mem.Get(t.Context(), flowstate.StateKey)
	assert.ErrorIs(t, err, kv.ErrNotFound, "no older value left under the key")
	current, size, publisher := w.mgr.AggregateKey()
	assert.True(t, publisher)
	assert.False(t, current)
	assert.Greater(t, size, int64(100), "the JSON's size, fitting or not")
	require.NoError(t, w.mgr.Flush(t.Context()))

	fmerge(t, w.mgr, 3, emptyValue())
	fmerge(t, w.mgr, 4, emptyValue())
	require.NoError(t, w.mgr.Flush(t.Context()))
	got, _ := fget(t, w.mgr)
	e, err = mem.Get(t.Context(), flowstate.StateKey)
	require.NoError(t, err, "written again once it fits")
	assert.Equal(t, string(encode(got)), string(e.Value))
	current, _, _ = w.mgr.AggregateKey()
	assert.True(t, current)
}
