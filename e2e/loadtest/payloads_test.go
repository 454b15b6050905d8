package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"flowstate/codec"
	"flowstate/flowstate"
)

func TestPayloadsDecodeToEachNodesOwnFlowsAndChangeEveryRound(t *testing.T) {
	p := encodePayloads(3, 4)
	require.GreaterOrEqual(t, p.rounds, 2)
	d := codec.Decoder{MaxFlows: 100}
	var prev [3][]flowstate.Flow
	for k := range uint64(3 * (p.rounds + 1)) {
		subject, body := p.at(k)
		node := int(k % 3)
		assert.Equal(t, p.subjects[node], subject)
		var r codec.Report
		require.NoError(t, d.Decode(body, &r))
		assert.Equal(t, uint64(node), r.NodeID)
		require.Len(t, r.Flows, 4)
		for j, f := range r.Flows {
			assert.Equal(t, flowstate.FlowID(node*4+j+1), f.ID)
		}
		assert.NotEqual(t, prev[node], r.Flows, "report %d repeats the node's previous one", k)
		prev[node] = r.Flows
	}
}
