package e2e

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// statsExample is PROTOCOL.md's example of the stats view in JSON.
const statsExample = `{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{},"processed_rows":{"1":52000},"last_errors":{"1":[{"time":1700000000000,"node_id":7,"message":"sink table missing"}]}}`

// TestTheStatsViewIsTheProtocolsExample: node 7 reports flow 1 with its
// processed rows and one error; a get of the stats view is the example's
// bytes in JSON, the same value in msgpack and in chunks, at the version of
// the seed's view; an unknown view is answered 400. On both backends.
func TestTheStatsViewIsTheProtocolsExample(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		statsView(t, newClient(t, startWorker(t, startServer(t).URL)))
	})
	t.Run("jetstream", func(t *testing.T) {
		statsView(t, newClient(t, startJSWorkers(t, startJetStreamServer(t).URL, 2)[1]))
	})
}

func statsView(t *testing.T, c *client) {
	t.Helper()
	rep := &codec.Report{NodeID: 7,
		Flows: []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 1024, LastExecTime: 1700000000000}},
		Health: flowstate.Health{HasProcessedRows: true, HasLastErrors: true, Flows: []flowstate.FlowHealth{{
			ID: 1, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 52000,
			LastErrors: []flowstate.FlowError{{Time: 1700000000000, Message: "sink table missing"}}}}}}
	acked := c.report(7, codec.AppendReport(nil, rep))

	seed := c.get()
	js := parseAggregateMsg(t, c.request(c.prefix+".state.get", nil, nats.Header{protocol.HeaderView: {protocol.ViewStats}, hdrAccept: {contentJSON}}))
	assert.Equal(t, statsExample, string(js.Body), "the stats view in JSON, byte for byte")
	assert.Equal(t, contentJSON, js.ContentType)
	assert.Equal(t, seed.version, js.version, "the stats view is of the same state")
	assert.GreaterOrEqual(t, js.Revision, acked.Revision)

	mp := parseAggregateMsg(t, c.request(c.prefix+".state.get", nil, nats.Header{protocol.HeaderView: {protocol.ViewStats}}))
	assert.Equal(t, contentMsgpack, mp.ContentType)
	v, err := codec.DecodeAggregate(mp.Body) // the stats view starts with the seed's maps; a decoder ignores the rest
	require.NoError(t, err)
	assert.Equal(t, uint64(1024), v.StateSize[1])

	chunk := parseAggregateMsg(t, c.request(c.prefix+".state.get", nil, nats.Header{protocol.HeaderView: {protocol.ViewStats}, protocol.HeaderChunks: {"1"}}))
	assert.Equal(t, mp.Body, chunk.Body, "one chunk of a small view is the whole view")

	bad := c.request(c.prefix+".state.get", nil, nats.Header{protocol.HeaderView: {"everything"}})
	assert.Equal(t, "400", bad.Header.Get(protocol.HeaderErrorCode))
	assert.Contains(t, bad.Header.Get(protocol.HeaderError), `unknown view "everything"`)
}
