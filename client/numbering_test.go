package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
)

// sniffer receives a copy of every report on flow.heartbeat.*; it never
// answers.
type sniffer struct{ sub *nats.Subscription }

func sniff(tb testing.TB, srv *server.Server) *sniffer {
	tb.Helper()
	nc := connect(tb, srv)
	sub, err := nc.SubscribeSync("flow.heartbeat.*")
	require.NoError(tb, err)
	require.NoError(tb, nc.Flush())
	return &sniffer{sub: sub}
}

// next decodes the next report sniffed.
func (s *sniffer) next(tb testing.TB) codec.Report {
	tb.Helper()
	msg, err := s.sub.NextMsg(waitTimeout)
	require.NoError(tb, err)
	var d codec.Decoder
	var r codec.Report
	require.NoError(tb, d.Decode(msg.Data, &r))
	r.Health = *r.Health.Clone()
	return r
}

// staleSend sends r and requires the worker's 409, whose reason names r's
// node_epoch and seq and the held report's.
func staleSend(tb testing.TB, c *client.Client, r client.Report, epoch, seq uint64, held string) {
	tb.Helper()
	_, err := c.Send(testCtx(tb), r)
	require.ErrorIs(tb, err, client.ErrStale)
	var se *client.ServiceError
	require.ErrorAs(tb, err, &se)
	assert.Equal(tb, 409, se.Code)
	assert.True(tb, se.Stale())
	assert.False(tb, se.Rejected())
	assert.Contains(tb, se.Reason, fmt.Sprintf("stale report of node %d: node_epoch %d seq %d", r.NodeID, epoch, seq))
	assert.Contains(tb, se.Reason, held)
}

func TestClientNumbersEveryReportItSendsOrPublishes(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	s := sniff(t, srv)
	c := newClient(t, srv, client.Options{})
	epoch := c.NodeEpoch()
	assert.GreaterOrEqual(t, epoch, uint64(time.Now().Add(-time.Hour).UnixMilli()), "the Client's creation time, unix ms")

	r := report(1, 10, 100, 1)
	v1 := mustSend(t, c, r)
	v2 := mustSend(t, c, r)
	assert.Greater(t, v2.Revision, v1.Revision, "the same report sent again is applied: it has a new seq")
	require.NoError(t, c.Publish(report(2, 20, 200, 2)))
	v3 := mustSend(t, c, report(3, 30, 300, 3))

	var seqs []uint64
	for node := range []uint64{1, 1, 2, 3} {
		got := s.next(t)
		assert.True(t, got.HasNodeEpoch, "report %d", node)
		assert.Equal(t, epoch, got.NodeEpoch, "report %d", node)
		require.True(t, got.Health.HasSeq, "report %d", node)
		seqs = append(seqs, got.Health.Seq)
	}
	for k := 1; k < len(seqs); k++ {
		assert.Greater(t, seqs[k], seqs[k-1], "seqs %v strictly increase, over nodes, Send and Publish", seqs)
	}

	// Reports older than those held, of the same process, change nothing.
	older := report(1, 99, 999, 9)
	older.Health = flowstate.Health{HasSeq: true, Seq: seqs[1]}
	staleSend(t, c, older, epoch, seqs[1], fmt.Sprintf("the state holds node_epoch %d seq %d", epoch, seqs[1]))
	older.NodeID, older.Health.Seq = 2, 0
	staleSend(t, c, older, epoch, 0, fmt.Sprintf("the state holds node_epoch %d seq %d", epoch, seqs[2]))
	got, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v3, got.Version, "a stale report changes nothing")
	assert.Equal(t, map[flowstate.FlowID]uint64{1: 10, 2: 20, 3: 30}, got.Value.StateSize)
}

func TestARetryOfATimedOutSendHasANewSeq(t *testing.T) {
	srv := startServer(t)
	s := sniff(t, srv) // a subscriber that never answers: without a worker, the request times out
	c := newClient(t, srv, client.Options{})
	r := report(1, 10, 100, 1)
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	_, err := c.Send(ctx, r)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	first := s.next(t)

	startWorker(t, srv, consumer.Config{})
	v := mustSend(t, c, r)
	retry := s.next(t)
	assert.Equal(t, first.NodeEpoch, retry.NodeEpoch)
	assert.Greater(t, retry.Health.Seq, first.Health.Seq, "the retry is numbered anew")
	got, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v, got.Version)
	assert.True(t, r.Value.Equal(got.Value))
}

func TestCallerSetNumbersAreKept(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	s := sniff(t, srv)
	c := newClient(t, srv, client.Options{})

	r := report(1, 10, 100, 1)
	r.NodeEpoch = 42
	mustSend(t, c, r)
	got := s.next(t)
	assert.Equal(t, uint64(42), got.NodeEpoch, "the caller's node_epoch")
	assert.True(t, got.Health.HasSeq, "numbered by the Client")

	r = report(1, 10, 100, 1)
	r.Health = flowstate.Health{HasSeq: true, Seq: 1000}
	mustSend(t, c, r)
	got = s.next(t)
	assert.Equal(t, c.NodeEpoch(), got.NodeEpoch, "the Client's node_epoch")
	assert.Equal(t, uint64(1000), got.Health.Seq, "the caller's seq")

	mustSend(t, c, report(1, 10, 100, 1))
	got = s.next(t)
	assert.Greater(t, got.Health.Seq, uint64(1000), "the Client numbers on above a seq the caller set in its epoch")
}

func TestUnnumberedClientSendsReportsAsGiven(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	s := sniff(t, srv)
	c := newClient(t, srv, client.Options{Unnumbered: true})
	assert.Zero(t, c.NodeEpoch())

	r := report(1, 10, 100, 1)
	v1 := mustSend(t, c, r)
	require.NoError(t, c.Publish(r))
	v2 := mustSend(t, c, r)
	assert.Greater(t, v2.Revision, v1.Revision)
	for range 3 {
		got := s.next(t)
		assert.False(t, got.HasNodeEpoch, "no node_epoch")
		assert.False(t, got.Health.HasSeq, "no seq")
		assert.False(t, got.Health.IsV3(), "a v2 report")
	}

	// The caller's own numbers go out as given: a repeat is stale.
	r.NodeEpoch, r.Health = 5, flowstate.Health{HasSeq: true, Seq: 7}
	mustSend(t, c, r)
	staleSend(t, c, r, 5, 7, "the state holds node_epoch 5 seq 7")
}

func TestAReportOfAClientTheNodeMovedAwayFromIsStale(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	a := newClient(t, srv, client.Options{})
	b := newClient(t, srv, client.Options{})
	require.NotEqual(t, a.NodeEpoch(), b.NodeEpoch(), "two Clients of one process have two epochs")

	mustSend(t, a, report(1, 10, 100, 1))
	v := mustSend(t, b, report(1, 20, 200, 1)) // node 1's process moved to b
	_, err := a.Send(testCtx(t), report(1, 30, 300, 1))
	require.ErrorIs(t, err, client.ErrStale)
	assert.Contains(t, err.Error(), "is a process the node moved away from")
	got, err := b.Get(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v, got.Version)
	assert.Equal(t, uint64(20), got.Value.StateSize[1])
}
