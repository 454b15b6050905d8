package consumer_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

func TestNodesViewListsEachNodeWithEpochTimeAndFlows(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	before := time.Now().UnixMilli()
	ack(t, f.nc, 3, codec.AppendReport(nil, &codec.Report{NodeID: 3, NodeEpoch: 1700000000000, HasNodeEpoch: true,
		Flows: []flowstate.Flow{flow(1, 1, 1), flow(2, 2, 2)}}))
	ack(t, f.nc, 1, report(1))

	req := nats.NewMsg("flow.state.nodes")
	req.Header.Set("Accept", "application/json")
	msg, err := f.nc.RequestMsg(req, wait)
	require.NoError(t, err)
	assert.Equal(t, protocol.ContentTypeJSON, msg.Header.Get(protocol.HeaderContentType))
	var view []consumer.NodeView
	require.NoError(t, json.Unmarshal(msg.Data, &view))
	require.Len(t, view, 2)
	assert.Equal(t, uint64(1), view[0].NodeID)
	assert.Nil(t, view[0].NodeEpoch)
	assert.Equal(t, 0, view[0].Flows)
	assert.Equal(t, uint64(3), view[1].NodeID)
	require.NotNil(t, view[1].NodeEpoch)
	assert.Equal(t, uint64(1700000000000), *view[1].NodeEpoch)
	assert.Equal(t, 2, view[1].Flows)
	assert.GreaterOrEqual(t, view[1].LastReport, before)

	msg, err = f.nc.Request("flow.state.nodes", nil, wait)
	require.NoError(t, err)
	assert.Equal(t, protocol.ContentTypeMsgpack, msg.Header.Get(protocol.HeaderContentType))
	var packed []consumer.NodeView
	require.NoError(t, msgpack.Unmarshal(msg.Data, &packed))
	assert.Equal(t, view, packed)
}

func TestSilentNodeIsEvictedAfterTheTTL(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: 0, NodeTTL: 100 * time.Millisecond})
	updates, err := f.nc.SubscribeSync("flow.state")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())
	rev := ack(t, f.nc, 1, report(1, flow(1, 5, 5)))

	// The update of the report, then the eviction's: the aggregate empties.
	var last *nats.Msg
	for range 2 {
		last, err = updates.NextMsg(wait)
		require.NoError(t, err, "no eviction update")
	}
	v, err := codec.DecodeAggregate(last.Data)
	require.NoError(t, err)
	assert.Empty(t, v.Flows())
	_, getRev, _ := get(t, f.nc, false)
	assert.Greater(t, getRev, rev)
	assert.EqualValues(t, 1, f.worker.Stats().Evicted)
	nodes, _, err := f.mgr.Nodes(t.Context())
	require.NoError(t, err)
	assert.False(t, slices.ContainsFunc(nodes, func(n state.NodeInfo) bool { return n.ID == 1 }), "node 1 is no longer stored")
}

func TestStatsReportTheStateAndReadiness(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	require.NoError(t, f.worker.Ready())
	rev := ack(t, f.nc, 1, report(1, flow(1, 5, 5), flow(2, 5, 5)))
	get(t, f.nc, false)
	s := f.worker.Stats()
	assert.Equal(t, rev, s.Revision)
	assert.Equal(t, 1, s.Nodes)
	assert.Equal(t, 2, s.Flows)
	assert.NotZero(t, s.AggregateBytes)
	assert.EqualValues(t, 1, s.Applied)
}

// nodesOf asks prefix's nodes view in JSON.
func nodesOf(t *testing.T, nc *nats.Conn, prefix string) []consumer.NodeView {
	t.Helper()
	req := nats.NewMsg(prefix + ".state.nodes")
	req.Header.Set("Accept", "application/json")
	msg, err := nc.RequestMsg(req, wait)
	require.NoError(t, err)
	require.Empty(t, msg.Header.Get("Nats-Service-Error"))
	var view []consumer.NodeView
	require.NoError(t, json.Unmarshal(msg.Data, &view))
	return view
}

// The nodes view's node_epoch is the state's: a worker that did not take
// the node's report shows what the one that took it shows, at one
// revision (two workers on one store, each with a prefix of its own so
// that the test asks each).
func TestNodesViewIsTheSameFromEveryWorker(t *testing.T) {
	srv := startServer(t, nil)
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	ra, rb := startReplica(t, mem, 8), startReplica(t, mem, 8)
	a := startSharedOn(t, srv, ra, consumer.Config{Prefix: "a", PublishInterval: 0})
	startSharedOn(t, srv, rb, consumer.Config{Prefix: "b", PublishInterval: 0})
	body := codec.AppendReport(nil, &codec.Report{NodeID: 3, NodeEpoch: 42, HasNodeEpoch: true,
		Flows: []flowstate.Flow{flow(1, 1, 1)}, Health: flowstate.Health{HasSeq: true, Seq: 1}})
	msg, err := a.nc.Request("a.heartbeat.3", body, wait)
	require.NoError(t, err)
	require.Empty(t, msg.Header.Get("Nats-Service-Error"))
	require.NoError(t, rb.Sync(t.Context()))
	require.NoError(t, ra.Sync(t.Context()))
	va, vb := nodesOf(t, a.nc, "a"), nodesOf(t, a.nc, "b")
	require.Len(t, vb, 1)
	require.NotNil(t, vb[0].NodeEpoch, "the worker that did not take the report")
	assert.Equal(t, uint64(42), *vb[0].NodeEpoch)
	for i := range va {
		va[i].LastReport, vb[i].LastReport = 0, 0 // each worker's clock
	}
	assert.Equal(t, va, vb)
}
