package client_test

import (
	"maps"
	"strconv"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// startSmallServer runs an embedded server whose max payload is 4 KB.
func startSmallServer(tb testing.TB) *server.Server {
	tb.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true, MaxPayload: 4096})
	require.NoError(tb, err)
	go srv.Start()
	require.True(tb, srv.ReadyForConnections(waitTimeout))
	tb.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
}

func TestGetReadsAStateLargerThanTheMaxPayload(t *testing.T) {
	srv := startSmallServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	want := flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{}, LastExecTimeMap: map[flowstate.FlowID]int64{}, StartTimeMap: map[flowstate.FlowID]int64{}}
	var v flowstate.Version
	for node := range uint64(20) {
		var ids []flowstate.FlowID
		for k := range flowstate.FlowID(40) {
			ids = append(ids, flowstate.FlowID(node)*1000+k)
		}
		r := report(node, 1<<20, 1_700_000_000_000, ids...)
		v = mustSend(t, c, r)
		maps.Copy(want.StateSize, r.Value.StateSize)
		maps.Copy(want.LastExecTimeMap, r.Value.LastExecTimeMap)
		maps.Copy(want.StartTimeMap, r.Value.StartTimeMap)
	}

	msg := singleGet(t, srv, "flow.state.get", "")
	assert.Equal(t, "413", msg.Header.Get(micro.ErrorCodeHeader), "the single-message form does not fit")

	s, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v, s.Version)
	assert.True(t, want.Equal(s.Value))

	msg = singleGet(t, srv, "flow.state.get", "application/json")
	assert.Equal(t, "413", msg.Header.Get(micro.ErrorCodeHeader), "the single-message JSON does not fit")
	body, jv, err := c.GetJSON(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v, jv)
	assert.Equal(t, string(flowstate.AppendJSON(nil, want.Flows())), string(body), "GreptimeDB's bytes, of any size")
	assert.Greater(t, len(body), 4096)
}

func TestWatchReportsTheChangedFlows(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{PublishInterval: 0})
	c := newClient(t, srv, client.Options{})
	mustSend(t, c, report(1, 10, 100, 1, 2))
	w := startWatch(t, c, nil)
	first := w.next(t)
	assert.Len(t, first.Changed, 2, "the first state: every flow")

	v := mustSend(t, c, report(1, 10, 100, 2, 3)) // flow 1 leaves, 3 comes
	s := w.until(t, at(v))
	if s.Revision == v.Revision {
		want := []flowstate.Flow{{ID: 1}, report(1, 10, 100, 3).Value.Flows()[0]}
		assert.Equal(t, want, s.Changed)
	}
	assert.True(t, report(1, 10, 100, 2, 3).Value.Equal(s.Value))
}

// fakeV1Worker answers gets with one message without Flow-State-Chunk and
// publishes full updates, as a worker that predates v2 does.
func fakeV1Worker(tb testing.TB, nc *nats.Conn, flows []flowstate.Flow) (publish func(rev uint64)) {
	tb.Helper()
	state := func(rev uint64) *nats.Msg {
		m := nats.NewMsg("")
		m.Header.Set(protocol.HeaderEpoch, "v1")
		m.Header.Set(protocol.HeaderRevision, strconv.FormatUint(rev, 10))
		m.Data = codec.AppendAggregate(nil, flows[:rev])
		return m
	}
	rev := uint64(1)
	sub, err := nc.Subscribe("flow.state.get", func(req *nats.Msg) {
		m := state(rev)
		m.Subject = req.Reply
		_ = nc.PublishMsg(m)
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(tb, nc.Flush())
	return func(r uint64) {
		m := state(r)
		m.Subject = "flow.state"
		require.NoError(tb, nc.PublishMsg(m))
	}
}

func TestGetAndWatchOfAV1WorkerFallBackToV1(t *testing.T) {
	srv := startServer(t)
	flows := report(1, 5, 50, 1, 2, 3).Value.Flows()
	publish := fakeV1Worker(t, connect(t, srv), flows)
	c := newClient(t, srv, client.Options{})

	s, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), s.Revision)

	w := startWatch(t, c, nil)
	assert.Equal(t, uint64(1), w.next(t).Revision)
	// Watch subscribes before its snapshot: publish until it follows.
	for r := uint64(2); r <= 3; r++ {
		publish(r)
	}
	last := w.until(t, func(s client.State) bool { return s.Revision == 3 })
	assert.True(t, flowstate.ValueOf(flows).Equal(last.Value), "followed flow.state")
}
