package state_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// clock is a settable Options.Now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestNodesListsEachReportingNodeWithItsTimeAndFlows(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := newManager(t, state.Options{Now: c.now})
	merge(t, m, 2, flowstate.FlowStateValue{StateSize: sizes{1: 1, 2: 2}})
	c.t = c.t.Add(time.Second)
	res := merge(t, m, 1, flowstate.FlowStateValue{LastExecTimeMap: times{3: 3}})

	nodes, v, err := m.Nodes(t.Context())
	require.NoError(t, err)
	assert.Equal(t, res.Version, v)
	assert.Equal(t, []state.NodeInfo{
		{ID: 1, LastReport: time.Unix(1001, 0), Flows: 1},
		{ID: 2, LastReport: time.Unix(1000, 0), Flows: 2},
	}, nodes)
	n, f := m.Size()
	assert.Equal(t, 2, n)
	assert.Equal(t, 3, f)
}

func TestEvictSilentRemovesOnlySilentNodesAndTheirKeys(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := newManager(t, state.Options{Now: c.now})
	merge(t, m, 1, flowstate.FlowStateValue{StateSize: sizes{1: 10, 7: 10}})
	c.t = c.t.Add(time.Minute)
	before := merge(t, m, 2, flowstate.FlowStateValue{StateSize: sizes{2: 20, 7: 5}})

	evicted, res, err := m.EvictSilent(t.Context(), c.t.Add(-30*time.Second))
	require.NoError(t, err)
	assert.Equal(t, []uint64{1}, evicted)
	assert.True(t, res.Changed)
	assert.Greater(t, res.Revision, before.Revision)

	v, ver := get(t, m)
	assert.Equal(t, res.Version, ver)
	assert.Equal(t, sizes{2: 20, 7: 5}, v.StateSize, "node 2's max takes over flow 7")
	dump := m.Dump()
	assert.NotContains(t, dump, flowstate.NodeKey(1))
	assert.Contains(t, dump, flowstate.NodeKey(2))
	assert.Equal(t, string(encode(v)), string(dump[flowstate.StateKey]))

	evicted, res, err = m.EvictSilent(t.Context(), c.t.Add(-30*time.Second))
	require.NoError(t, err)
	assert.Empty(t, evicted)
	assert.False(t, res.Changed)
}
