package state_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// manyErrors is a report of node naming flows 1 to flows, each with three
// errors of 1,000 bytes, every message a string of its own: about 3 kB of
// messages per flow.
func manyErrors(node uint64, flows int, fill byte) state.Report {
	h := &flowstate.Health{HasLastErrors: true, Flows: make([]flowstate.FlowHealth, flows)}
	for i := range h.Flows {
		errs := make([]flowstate.FlowError, flowstate.MaxFlowErrors)
		for k := range errs {
			errs[k] = flowstate.FlowError{Time: int64(k), Message: strings.Repeat(string(fill), 1000)}
		}
		h.Flows[i] = flowstate.FlowHealth{ID: flowstate.FlowID(i + 1), Has: flowstate.HasLastErrors, LastErrors: errs}
	}
	return state.Report{Node: node, Health: h}
}

// heapInUse is the bytes of live heap objects after a collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Nodes that send errors twice and then a report without any leave the
// Manager holding none of their messages: the heap comes back to what it
// was (the buffers a node reuses from one report to the next kept both
// fills' messages: 12 MB here).
func TestManagerKeepsNoClearedError(t *testing.T) {
	const nodes, flows = 10, 200 // 600 kB of messages per report
	m := state.NewManager(state.Options{})
	before := heapInUse()
	for node := uint64(1); node <= nodes; node++ {
		for _, fill := range []byte{'a', 'b'} {
			_, err := m.Merge(t.Context(), manyErrors(node, flows, fill))
			require.NoError(t, err)
		}
	}
	held := heapInUse()
	require.Greater(t, held, before+5<<20, "the state holds its nodes' last messages: 6 MB")
	for node := uint64(1); node <= nodes; node++ {
		_, err := m.Merge(t.Context(), state.Report{Node: node})
		require.NoError(t, err)
	}
	after := heapInUse()
	assert.Zero(t, m.ErrorBytes())
	assert.Less(t, after, before+1<<20, "heap after clearing: %d bytes over the empty state's (%d while held)", int64(after)-int64(before), held-before)
	runtime.KeepAlive(m)
}
