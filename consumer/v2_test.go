package consumer_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// applyDelta applies a delta's flows to state, a map of flows by id.
func applyDelta(state map[flowstate.FlowID]flowstate.Flow, flows []flowstate.Flow) {
	for _, f := range flows {
		if f.Has == 0 {
			delete(state, f.ID)
		} else {
			state[f.ID] = f
		}
	}
}

func stateOf(flows []flowstate.Flow) map[flowstate.FlowID]flowstate.Flow {
	m := make(map[flowstate.FlowID]flowstate.Flow, len(flows))
	applyDelta(m, flows)
	return m
}

// nextDelta returns the next message of sub with its version headers read.
func nextDelta(tb testing.TB, sub *nats.Subscription) (msg *nats.Msg, rev, base uint64) {
	tb.Helper()
	msg, err := sub.NextMsg(wait)
	require.NoError(tb, err)
	rev, err = strconv.ParseUint(msg.Header.Get(protocol.HeaderRevision), 10, 64)
	require.NoError(tb, err)
	base, err = strconv.ParseUint(msg.Header.Get(protocol.HeaderBaseRevision), 10, 64)
	require.NoError(tb, err)
	return msg, rev, base
}

func TestDeltasRebuildTheStateFromASnapshot(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: 0})
	sub, err := f.nc.SubscribeSync("flow.state.delta")
	require.NoError(t, err)
	full, err := f.nc.SubscribeSync("flow.state")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())

	reports := []struct {
		node uint64
		body []byte
	}{
		{1, report(1, flow(1, 10, 100), flow(2, 20, 200))},
		{2, report(2, flow(2, 25, 150), flow(3, 30, 300))},
		{1, report(1, flow(1, 11, 101))},                // flow 2 now only from node 2
		{2, report(2)},                                  // node 2 leaves: flows 2 and 3 go
		{3, report(3, flow(7, 70, 700))},                // a new node
		{1, report(1, flow(1, 11, 101), flow(9, 1, 1))}, // unchanged flow 1, new flow 9
	}
	local := map[flowstate.FlowID]flowstate.Flow{}
	var localRev uint64
	applied := 0
	for i, r := range reports {
		rev := ack(t, f.nc, r.node, r.body)
		msg, drev, base := nextDelta(t, sub)
		require.Equal(t, rev, drev, "a delta per report with --publish-interval 0")
		// The full update goes out at the same moment.
		fm, err := full.NextMsg(wait)
		require.NoError(t, err)
		assert.Equal(t, msg.Header.Get(protocol.HeaderRevision), fm.Header.Get(protocol.HeaderRevision))
		gotBase, flows, err := codec.DecodeDelta(msg.Data, nil)
		require.NoError(t, err)
		assert.Equal(t, base, gotBase, "body base equals the header")
		if msg.Header.Get(protocol.HeaderResync) == "1" || base != localRev {
			assert.Empty(t, flows, "a resync carries no flows")
			snap, srev, _ := get(t, f.nc, false)
			v, err := codec.DecodeAggregate(snap)
			require.NoError(t, err)
			local, localRev = stateOf(v.Flows()), srev
			continue
		}
		applyDelta(local, flows)
		localRev = drev
		applied++
		body, _, _ := get(t, f.nc, false)
		v, err := codec.DecodeAggregate(body)
		require.NoError(t, err)
		assert.Equal(t, stateOf(v.Flows()), local, "after report %d", i)
	}
	assert.GreaterOrEqual(t, applied, len(reports)-1, "every delta after the first applies")
}

func TestStateUpdatesDeltaPublishesNoFullUpdate(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: 0, StateUpdates: consumer.StateUpdatesDelta})
	full, err := f.nc.SubscribeSync("flow.state")
	require.NoError(t, err)
	sub, err := f.nc.SubscribeSync("flow.state.delta")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())
	ack(t, f.nc, 1, report(1, flow(1, 10, 100)))
	_, _, _ = nextDelta(t, sub)
	require.NoError(t, f.nc.Flush())
	n, _, err := full.Pending()
	require.NoError(t, err)
	assert.Zero(t, n, "no flow.state with --state-updates delta")
}

func TestStateUpdatesIsValidated(t *testing.T) {
	assert.NoError(t, consumer.Config{StateUpdates: "full"}.Validate())
	assert.Error(t, consumer.Config{StateUpdates: "deltas"}.Validate())
}

// chunkedGet sends a get with Flow-State-Chunks: 1 and returns every reply
// until i/n reaches n.
func chunkedGet(tb testing.TB, nc *nats.Conn, hdr map[string]string) []*nats.Msg {
	tb.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(tb, err)
	defer func() { _ = sub.Unsubscribe() }()
	req := nats.NewMsg("flow.state.get")
	req.Reply = inbox
	req.Header.Set(protocol.HeaderChunks, "1")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	require.NoError(tb, nc.PublishMsg(req))
	var msgs []*nats.Msg
	for {
		msg, err := sub.NextMsg(wait)
		require.NoError(tb, err)
		msgs = append(msgs, msg)
		i, n, ok := strings.Cut(msg.Header.Get(protocol.HeaderChunk), "/")
		if !ok || i == n {
			return msgs
		}
		require.Less(tb, len(msgs), 100000, "chunks never end")
	}
}

func TestChunkedGetSplitsALargeStateWithinTheMaxPayload(t *testing.T) {
	const maxPayload = 4096
	f := startWorker(t, startServer(t, &server.Options{MaxPayload: maxPayload}), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	var want []flowstate.Flow
	for node := uint64(1); node <= 10; node++ {
		var flows []flowstate.Flow
		for k := range 60 {
			fl := flow(flowstate.FlowID(node*1000+uint64(k)), node*uint64(k), int64(k))
			flows = append(flows, fl)
		}
		want = append(want, flows...)
		ack(t, f.nc, node, report(node, flows...))
	}
	msg, err := f.nc.Request("flow.state.get", nil, wait)
	require.NoError(t, err)
	assert.Equal(t, "413", msg.Header.Get(protocol.HeaderErrorCode), "the single-message get does not fit")

	msgs := chunkedGet(t, f.nc, nil)
	require.Greater(t, len(msgs), 1)
	var got []flowstate.Flow
	var last flowstate.FlowID
	for i, m := range msgs {
		assert.Equal(t, strconv.Itoa(i+1)+"/"+strconv.Itoa(len(msgs)), m.Header.Get(protocol.HeaderChunk))
		assert.Equal(t, protocol.ContentTypeMsgpack, m.Header.Get(protocol.HeaderContentType))
		assert.Equal(t, msgs[0].Header.Get(protocol.HeaderRevision), m.Header.Get(protocol.HeaderRevision))
		assert.Equal(t, msgs[0].Header.Get(protocol.HeaderEpoch), m.Header.Get(protocol.HeaderEpoch))
		assert.LessOrEqual(t, len(m.Data)+len(m.Header.Get(protocol.HeaderChunk)), maxPayload)
		v, err := codec.DecodeAggregate(m.Data)
		require.NoError(t, err)
		flows := v.Flows()
		require.NotEmpty(t, flows)
		assert.Greater(t, flows[0].ID, last, "ranges ascend without overlap")
		last = flows[len(flows)-1].ID
		got = append(got, flows...)
	}
	assert.Equal(t, flowstate.ValueOf(want).Flows(), got)

	// The get endpoint answers one request after the other: once a later
	// get is answered, the chunked one is counted.
	_, err = f.nc.Request("flow.state.get", nil, wait)
	require.NoError(t, err)
	st := f.worker.Stats()
	assert.EqualValues(t, 1, st.ChunkedGets)
	assert.EqualValues(t, len(msgs), st.ChunksSent)
}

func TestChunkedGetOfASmallStateIsOneChunk(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	ack(t, f.nc, 1, report(1, flow(1, 10, 100)))
	body, rev, _ := get(t, f.nc, false)
	msgs := chunkedGet(t, f.nc, nil)
	require.Len(t, msgs, 1)
	assert.Equal(t, "1/1", msgs[0].Header.Get(protocol.HeaderChunk))
	assert.Equal(t, strconv.FormatUint(rev, 10), msgs[0].Header.Get(protocol.HeaderRevision))
	assert.Equal(t, body, msgs[0].Data, "the one chunk is the single-message get's body")
}

func TestChunkedGetAsJSONIsABadRequest(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	msgs := chunkedGet(t, f.nc, map[string]string{protocol.HeaderAccept: protocol.ContentTypeJSON})
	require.Len(t, msgs, 1)
	assert.Equal(t, "400", msgs[0].Header.Get(protocol.HeaderErrorCode))
}

func TestADeltaOverTheMaxPayloadIsAResync(t *testing.T) {
	f := startWorker(t, startServer(t, &server.Options{MaxPayload: 4096}), consumer.Config{PublishInterval: 0})
	sub, err := f.nc.SubscribeSync("flow.state.delta")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())
	sizes := func(from flowstate.FlowID) []flowstate.Flow {
		var flows []flowstate.Flow
		for id := from; id < from+500; id++ {
			flows = append(flows, flowstate.Flow{ID: id, Has: flowstate.HasStateSize, StateSize: 1})
		}
		return flows
	}
	ack(t, f.nc, 1, report(1, sizes(1000)...))
	_, _, _ = nextDelta(t, sub)
	// 500 flows leave and 500 others come: a delta of about 7 KB.
	rev := ack(t, f.nc, 1, report(1, sizes(2000)...))
	msg, drev, base := nextDelta(t, sub)
	require.Equal(t, rev, drev)
	assert.Equal(t, "1", msg.Header.Get(protocol.HeaderResync))
	gotBase, flows, err := codec.DecodeDelta(msg.Data, nil)
	require.NoError(t, err)
	assert.Equal(t, base, gotBase)
	assert.Empty(t, flows)
	// The next delta that fits goes out as usual.
	rev = ack(t, f.nc, 1, report(1, sizes(2001)...))
	msg, drev, base = nextDelta(t, sub)
	require.Equal(t, rev, drev)
	assert.Empty(t, msg.Header.Get(protocol.HeaderResync))
	_, flows, err = codec.DecodeDelta(msg.Data, nil)
	require.NoError(t, err)
	assert.Equal(t, []flowstate.Flow{{ID: 2000}, {ID: 2500, Has: flowstate.HasStateSize, StateSize: 1}}, flows)
	assert.Less(t, base, drev)
	// Deltas are published one after the other: the third is out, so the
	// first two are counted.
	st := f.worker.Stats()
	assert.GreaterOrEqual(t, st.DeltasPublished, uint64(2))
	assert.EqualValues(t, 1, st.DeltaResyncs)
	assert.Positive(t, st.DeltaBytes)
}
