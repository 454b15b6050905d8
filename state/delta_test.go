package state_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

func TestManagerRefusesAReportPastItsLimits(t *testing.T) {
	m := newManager(t, state.Options{Limits: state.Limits{MaxNodes: 2, MaxFlows: 3}})
	merge(t, m, 1, value(sizes{1: 1, 2: 2}, nil, nil))
	before := merge(t, m, 2, value(sizes{3: 3}, nil, nil))
	dump := m.Dump()

	_, err := m.Merge(t.Context(), state.Report{Node: 3, Flows: nil})
	var ce *state.CapacityError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, state.LimitMaxNodes, ce.Limit)
	_, err = m.Merge(t.Context(), state.Report{Node: 2, Flows: value(sizes{3: 3, 4: 4}, nil, nil).Flows()})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, state.LimitMaxTotalFlows, ce.Limit)
	assert.ErrorIs(t, err, state.ErrCapacity)

	_, ver := get(t, m)
	assert.Equal(t, before.Version, ver, "revision unchanged")
	assert.Equal(t, dump, m.Dump(), "nothing written")
	merge(t, m, 2, value(sizes{4: 4}, nil, nil)) // a swap stays within the limit
}

func TestManagerDeltaCarriesWhatChangedSinceTheLastOne(t *testing.T) {
	m := newManager(t, state.Options{})
	ctx := t.Context()
	d, err := m.Delta(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), d.Base)
	assert.Empty(t, d.Flows)

	merge(t, m, 1, value(sizes{1: 10, 2: 20}, nil, nil))
	r := merge(t, m, 2, value(sizes{2: 5, 3: 30}, nil, nil))
	d, err = m.Delta(ctx, d.Flows)
	require.NoError(t, err)
	assert.Equal(t, r.Version, d.Version)
	assert.Zero(t, d.Base, "the first delta of the epoch")
	assert.False(t, d.Resync)
	assert.Equal(t, value(sizes{1: 10, 2: 20, 3: 30}, nil, nil).Flows(), d.Flows)

	r2 := merge(t, m, 1, value(sizes{2: 21}, nil, nil))
	d, err = m.Delta(ctx, d.Flows)
	require.NoError(t, err)
	assert.Equal(t, r.Revision, d.Base)
	assert.Equal(t, r2.Version, d.Version)
	assert.Equal(t, []flowstate.Flow{{ID: 1}, {ID: 2, Has: flowstate.HasStateSize, StateSize: 21}}, d.Flows, "flow 1 left")

	// A cleared state starts a new epoch: base 0 again.
	m.Clear()
	r3 := merge(t, m, 5, value(sizes{5: 5}, nil, nil))
	d, err = m.Delta(ctx, d.Flows)
	require.NoError(t, err)
	assert.Equal(t, r3.Version, d.Version)
	assert.Zero(t, d.Base)
	assert.False(t, d.Resync)
	assert.Equal(t, value(sizes{5: 5}, nil, nil).Flows(), d.Flows)
}

func TestManagerDeltaResyncsPastHalfTheAggregate(t *testing.T) {
	m := newManager(t, state.Options{})
	big := value(make(sizes), nil, nil)
	for id := range 3000 {
		big.StateSize[flowstate.FlowID(id)] = 1
	}
	merge(t, m, 1, big)
	d, err := m.Delta(t.Context(), nil)
	require.NoError(t, err)
	assert.True(t, d.Resync, "3,000 changes, past max(1024, half the aggregate)")
	assert.Empty(t, d.Flows)
}
