package client_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// healthReport is a report of node with flows ids, each with rows and the
// errors given.
func healthReport(node uint64, rows uint64, errs []flowstate.FlowError, ids ...flowstate.FlowID) client.Report {
	r := report(node, 1<<10, 1_700_000_000_000, ids...)
	r.Health = flowstate.Health{HasProcessedRows: true, HasLastErrors: true}
	for _, id := range ids {
		r.Health.Flows = append(r.Health.Flows, flowstate.FlowHealth{ID: id, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors,
			ProcessedRows: rows, LastErrors: errs})
	}
	return r
}

func TestGetStatsIsTheWorkersJSON(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	odd := "<sink> & \"quoted\" \u2028 é\n\x01"
	mustSend(t, c, healthReport(7, 52000, []flowstate.FlowError{{Time: 1_700_000_000_500, Message: odd}, {Time: 1_700_000_000_000, Message: "sink table missing"}}, 1, 2))
	mustSend(t, c, healthReport(9, 60000, []flowstate.FlowError{{Time: 1_700_000_000_500, Message: "timeout"}}, 2, 3))
	r := report(4, 5, 6, 10) // a flow without health
	v := mustSend(t, c, r)

	view, sv, err := c.GetStats(testCtx(t))
	require.NoError(t, err)
	body, jv, err := c.GetStatsJSON(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v, sv)
	assert.Equal(t, v, jv)
	assert.Equal(t, string(body), string(view.AppendJSON(nil)), "the worker's bytes")
	js, err := view.MarshalJSON()
	require.NoError(t, err)
	assert.Equal(t, string(body), string(js))
	assert.Contains(t, string(body), "\"message\":\"<sink> & \\\"quoted\\\" \u2028 é\\n\\u0001\"", "escaped as serde_json, not as encoding/json")

	seed, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.True(t, seed.Value.Equal(view.Value()), "the view holds GreptimeDB's value")
	require.Len(t, view.Stats, 3)
	assert.Equal(t, flowstate.FlowStats{ID: 2, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 60000,
		LastErrors: []flowstate.StatsError{
			{Time: 1_700_000_000_500, NodeID: 7, Message: odd},
			{Time: 1_700_000_000_500, NodeID: 9, Message: "timeout"},
			{Time: 1_700_000_000_000, NodeID: 7, Message: "sink table missing"},
		}}, view.Stats[1], "the most rows, the newest errors over the nodes, ties in node order")
}

func TestGetStatsReadsAViewLargerThanTheMaxPayload(t *testing.T) {
	srv := startSmallServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	var flows []flowstate.Flow
	var nodes []flowstate.NodeHealth
	var v flowstate.Version
	for node := range uint64(8) {
		var ids []flowstate.FlowID
		for k := range flowstate.FlowID(10) {
			ids = append(ids, flowstate.FlowID(node)*100+k)
		}
		msg := strings.Repeat(string(rune('a'+node)), 60)
		r := healthReport(node, node*1000, []flowstate.FlowError{{Time: int64(node), Message: msg}}, ids...)
		v = mustSend(t, c, r)
		flows = append(flows, r.Value.Flows()...)
		h := r.Health
		nodes = append(nodes, flowstate.NodeHealth{NodeID: node, Health: &h})
	}
	stats := flowstate.MergeHealth(nil, nodes)
	require.Greater(t, codec.StatsLen(flows, stats), 4096, "the view's msgpack exceeds the max payload")

	_, _, err := c.GetStatsJSON(testCtx(t))
	var se *client.ServiceError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 413, se.Code, "the single-message view does not fit")

	view, sv, err := c.GetStats(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v, sv)
	assert.Equal(t, flows, view.Flows)
	assert.Equal(t, stats, view.Stats)
	assert.Equal(t, string(flowstate.AppendStatsJSON(nil, flows, stats)), string(view.AppendJSON(nil)))
}

// fakeStatsWorker answers a stats get with the given chunks: each a view
// and the Flow-State-Chunk and revision headers.
func fakeStatsWorker(tb testing.TB, nc *nats.Conn, chunks []fakeChunk) {
	tb.Helper()
	sub, err := nc.Subscribe("flow.state.get", func(req *nats.Msg) {
		assert.Equal(tb, protocol.ViewStats, req.Header.Get(protocol.HeaderView))
		assert.Equal(tb, "1", req.Header.Get(protocol.HeaderChunks))
		for _, ch := range chunks {
			m := nats.NewMsg(req.Reply)
			m.Header.Set(protocol.HeaderEpoch, "e")
			m.Header.Set(protocol.HeaderRevision, ch.rev)
			m.Header.Set(protocol.HeaderChunk, ch.chunk)
			m.Data = ch.body
			_ = nc.PublishMsg(m)
		}
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(tb, nc.Flush())
}

type fakeChunk struct {
	chunk, rev string
	body       []byte
}

func TestGetStatsRefusesChunksThatBreakTheProtocol(t *testing.T) {
	view := func(ids ...flowstate.FlowID) []byte {
		var flows []flowstate.Flow
		var stats []flowstate.FlowStats
		for _, id := range ids {
			flows = append(flows, flowstate.Flow{ID: id, Has: flowstate.HasStateSize, StateSize: 1})
			stats = append(stats, flowstate.FlowStats{ID: id, Has: flowstate.HasProcessedRows, ProcessedRows: 1})
		}
		return codec.AppendStats(nil, flows, stats)
	}
	for name, tc := range map[string]struct {
		chunks []fakeChunk
		want   string
	}{
		"ids not ascending":  {[]fakeChunk{{"1/2", "3", view(5, 6)}, {"2/2", "3", view(1, 2)}}, "starts at flow 1"},
		"two revisions":      {[]fakeChunk{{"1/2", "3", view(1)}, {"2/2", "4", view(2)}}, "revision 4"},
		"a chunk skipped":    {[]fakeChunk{{"1/3", "3", view(1)}, {"3/3", "3", view(2)}}, "chunk 3/3 after chunk 1/3"},
		"a bad view":         {[]fakeChunk{{"1/1", "3", []byte{0x81, 0xae}}}, "chunk 1/1: codec"},
		"a bad chunk header": {[]fakeChunk{{"2/1", "3", view(1)}}, `"2/1" is not`},
	} {
		t.Run(name, func(t *testing.T) {
			srv := startServer(t)
			fakeStatsWorker(t, connect(t, srv), tc.chunks)
			c := newClient(t, srv, client.Options{})
			_, _, err := c.GetStats(testCtx(t))
			require.ErrorIs(t, err, client.ErrBadReply)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	srv := startServer(t)
	fakeStatsWorker(t, connect(t, srv), []fakeChunk{{"1/2", "3", view(1, 2)}, {"2/2", "3", view(7)}})
	got, v, err := newClient(t, srv, client.Options{}).GetStats(testCtx(t))
	require.NoError(t, err, "the fake's chunks, in order, are read")
	assert.Equal(t, flowstate.Version{Epoch: "e", Revision: 3}, v)
	assert.Len(t, got.Flows, 3)
	assert.Len(t, got.Stats, 3)
}

// TestAnErrorMessagePastTheLimitIsCutBeforeItIsSent: the client cuts a
// message longer than flowstate.MaxErrorMessage bytes at a character
// boundary (the worker would refuse the report whole), in Send and
// Publish alike, and leaves the caller's report as given.
func TestAnErrorMessagePastTheLimitIsCutBeforeItIsSent(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	long := "x" + strings.Repeat("é", flowstate.MaxErrorMessage) // 2,049 bytes: byte 1,024 is inside a character
	r := healthReport(7, 1, []flowstate.FlowError{{Time: 1_700_000_000_000, Message: long}}, 1)
	mustSend(t, c, r)
	assert.Equal(t, long, r.Health.Flows[0].LastErrors[0].Message, "the caller's report is as given")

	view, _, err := c.GetStats(testCtx(t))
	require.NoError(t, err)
	require.Len(t, view.Stats, 1)
	got := view.Stats[0].LastErrors[0].Message
	assert.Equal(t, long[:flowstate.MaxErrorMessage-1], got, "cut at the last character boundary within the limit")
	assert.True(t, flowstate.ValidMessage(got))

	nc := connect(t, srv)
	sub, err := nc.SubscribeSync(c.HeartbeatSubject(8))
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	require.NoError(t, c.Publish(healthReport(8, 1, []flowstate.FlowError{{Time: 1, Message: long}}, 1)))
	msg, err := sub.NextMsgWithContext(testCtx(t))
	require.NoError(t, err)
	var rep codec.Report
	require.NoError(t, new(codec.Decoder).Decode(msg.Data, &rep))
	assert.Equal(t, long[:flowstate.MaxErrorMessage-1], rep.Health.Flows[0].LastErrors[0].Message, "published cut too")
}
