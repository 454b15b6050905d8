package jetstream

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/kv"
)

func TestPubAckSeqReadsAcknowledgementsAndErrors(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		seq        uint64
		err        error
	}{
		{"plain", `{"stream":"KV_flow_state","seq":17}`, 17, nil},
		{"domain and duplicate", `{"stream":"KV_b", "domain":"hub", "seq":18446744073709551615, "duplicate":false}`, 1<<64 - 1, nil},
		{"spaces", " {\n\t\"seq\" : 3 ,\"stream\" : \"S\" }\r\n", 3, nil},
		{"escaped stream name", `{"stream":"KV_\u0062","seq":5}`, 5, nil},
		{"server error", `{"error":{"code":503,"err_code":10077,"description":"no quorum"},"stream":"KV_b","seq":0}`, 0, &natsjs.APIError{}},
		{"no stream", `{"seq":4}`, 0, natsjs.ErrInvalidJSAck},
		{"empty stream", `{"stream":"","seq":4}`, 0, natsjs.ErrInvalidJSAck},
		{"negative seq", `{"stream":"S","seq":-4}`, 0, natsjs.ErrInvalidJSAck},
		{"fraction", `{"stream":"S","seq":4.5}`, 0, natsjs.ErrInvalidJSAck},
		{"leading zero", `{"stream":"S","seq":04}`, 0, natsjs.ErrInvalidJSAck},
		{"overflow", `{"stream":"S","seq":18446744073709551616}`, 0, natsjs.ErrInvalidJSAck},
		{"trailing data", `{"stream":"S","seq":4}x`, 0, natsjs.ErrInvalidJSAck},
		{"not an object", `[1]`, 0, natsjs.ErrInvalidJSAck},
		{"unterminated", `{"stream":"S","seq":4`, 0, natsjs.ErrInvalidJSAck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq, err := pubAckSeq(&nats.Msg{Data: []byte(tc.data)})
			switch want := tc.err.(type) {
			case nil:
				require.NoError(t, err)
				assert.Equal(t, tc.seq, seq)
			case *natsjs.APIError:
				var got *natsjs.APIError
				require.ErrorAs(t, err, &got)
				assert.Equal(t, 503, got.Code)
				assert.True(t, unavailable(err), "a 503 from the server means unavailable")
			default:
				require.ErrorIs(t, err, want)
			}
		})
	}
	noResponders := &nats.Msg{Header: nats.Header{"Status": []string{"503"}}}
	_, err := pubAckSeq(noResponders)
	require.ErrorIs(t, err, natsjs.ErrNoStreamResponse)
	assert.True(t, unavailable(err))
	_, err = pubAckSeq(&nats.Msg{})
	require.ErrorIs(t, err, natsjs.ErrInvalidJSAck)
}

// TestScanPubAckAgreesWithEncodingJSON checks the in-place reader against
// encoding/json: whatever it accepts, encoding/json reads the same sequence
// from, with a stream.
func TestScanPubAckAgreesWithEncodingJSON(t *testing.T) {
	inputs := []string{
		`{"stream":"S","seq":1}`, `{"seq":0,"stream":"S"}`, `{}`, `{"stream":"S","seq":1,"seq":2}`,
		`{"stream":"S","stream":"T","seq":1}`, `{"stream":"S","seq":1,"x":true,"y":false}`,
		`{"stream":"S","seq":1,"x":tru}`, `{"stream":"S","seq":1,}`, `{,"stream":"S","seq":1}`,
		`{"stream":"S" "seq":1}`, `{"stream":"S","seq":1e3}`, `{"stream":"S","seq":1}}`, `{"stream":"S","seq":1,"error":null}`,
		`{"stream":"S","seq":1,"n":null}`, `{"stream":"S","seq":01}`, "{\"stream\":\"S\x01\",\"seq\":1}",
	}
	for _, in := range inputs {
		seq, ok := scanPubAck([]byte(in))
		if !ok {
			continue
		}
		var r struct {
			Stream string `json:"stream"`
			Seq    uint64 `json:"seq"`
		}
		require.NoError(t, json.Unmarshal([]byte(in), &r), "%s: accepted in place, refused by encoding/json", in)
		assert.NotEmpty(t, r.Stream, in)
		assert.Equal(t, r.Seq, seq, in)
	}
}

func TestPubAckSeqDoesNotAllocate(t *testing.T) {
	m := &nats.Msg{Data: []byte(`{"stream":"KV_flow_state","seq":123456789}`)}
	allocs := testing.AllocsPerRun(1000, func() {
		if seq, err := pubAckSeq(m); err != nil || seq != 123456789 {
			t.Fatal(seq, err)
		}
	})
	assert.Zero(t, allocs)
}

// sink is a subscriber that takes puts without answering them, so that a
// test answers them itself.
type sink struct {
	nc   *nats.Conn
	msgs chan *nats.Msg
}

func newSink(t *testing.T) (*sink, *server.Server) {
	srv := natstest.Start(t, &server.Options{})
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	s := &sink{nc: nc, msgs: make(chan *nats.Msg, 64)}
	_, err = nc.ChanSubscribe("puts.>", s.msgs)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return s, srv
}

func (s *sink) next(t *testing.T) *nats.Msg {
	t.Helper()
	select {
	case m := <-s.msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no put reached the server")
		return nil
	}
}

func (s *sink) ack(t *testing.T, m *nats.Msg, seq int) {
	t.Helper()
	require.NoError(t, s.nc.Publish(m.Reply, []byte(`{"stream":"KV_t","seq":`+itoa(seq)+`}`)))
	require.NoError(t, s.nc.Flush())
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// answers collects the answers of puts.
type answers chan answerOf

type answerOf struct {
	key string
	rev kv.Revision
	err error
}

func (a answers) done(key string) kv.PutReceiver {
	return kv.PutFunc(func(rev kv.Revision, err error) { a <- answerOf{key, rev, err} })
}

func (a answers) next(t *testing.T) answerOf {
	t.Helper()
	select {
	case x := <-a:
		return x
	case <-time.After(5 * time.Second):
		t.Fatal("a put was not answered")
		return answerOf{}
	}
}

func newTestPuts(t *testing.T, nc *nats.Conn, window int, timeout time.Duration) (*asyncPuts, *atomic.Int32) {
	return newTestPutsOn(t, nc, window, timeout, clock.Real)
}

func newTestPutsOn(t *testing.T, nc *nats.Conn, window int, timeout time.Duration, clk clock.Clock) (*asyncPuts, *atomic.Int32) {
	var downs atomic.Int32
	a, err := newAsyncPuts(nc, window, timeout, clk, func(error) { downs.Add(1) }, func() string { return "e1" }, func(uint64) {}, newKnownWrites())
	require.NoError(t, err)
	t.Cleanup(a.close)
	return a, &downs
}

func noCheck() error { return nil }

func TestAsyncPutsDropALateAcknowledgement(t *testing.T) {
	s, srv := newSink(t)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	a, downs := newTestPuts(t, nc, 1, 100*time.Millisecond)
	got := make(answers, 4)

	require.NoError(t, a.put(t.Context(), "puts.a", "a", []byte("1"), nil, noCheck, got.done("a")))
	first := s.next(t)
	x := got.next(t)
	assert.Equal(t, "a", x.key)
	require.ErrorIs(t, x.err, kv.ErrUnavailable, "no acknowledgement within the timeout")
	require.ErrorIs(t, x.err, natsjs.ErrAsyncPublishTimeout)
	assert.Equal(t, int32(1), downs.Load(), "a timeout marks JetStream down")

	// The window of one slot is free again; the late acknowledgement of
	// the first put must not answer the second.
	require.NoError(t, a.put(t.Context(), "puts.b", "b", []byte("2"), nil, noCheck, got.done("b")))
	second := s.next(t)
	assert.NotEqual(t, first.Reply, second.Reply, "the slot took a new reply subject")
	s.ack(t, first, 7)
	s.ack(t, second, 8)
	x = got.next(t)
	require.NoError(t, x.err)
	assert.Equal(t, answerOf{key: "b", rev: kv.Revision{Epoch: "e1", Seq: 8}}, x)
	select {
	case x := <-got:
		t.Fatalf("answered twice: %+v", x)
	default:
	}

	// A put answered twice (around a stream leader's change, two servers
	// that each take themselves for the leader may both answer it): its
	// second answer must not answer the next put of its slot.
	require.NoError(t, a.put(t.Context(), "puts.c", "c", []byte("3"), nil, noCheck, got.done("c")))
	third := s.next(t)
	s.ack(t, third, 9)
	assert.Equal(t, uint64(9), got.next(t).rev.Seq)
	require.NoError(t, a.put(t.Context(), "puts.d", "d", []byte("4"), nil, noCheck, got.done("d")))
	fourth := s.next(t)
	assert.NotEqual(t, third.Reply, fourth.Reply, "every put has a reply subject of its own")
	s.ack(t, third, 10)
	s.ack(t, fourth, 11)
	assert.Equal(t, answerOf{key: "d", rev: kv.Revision{Epoch: "e1", Seq: 11}}, got.next(t))
}

// A put's wait is bounded by the store's clock: with an hour's timeout on a
// manual clock, a put with no acknowledgement is answered once that clock
// has passed the hour, and not before.
func TestAsyncPutsTimeOutByTheirClock(t *testing.T) {
	s, srv := newSink(t)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	m := clock.NewManual(time.Unix(1_700_000_000, 0))
	a, _ := newTestPutsOn(t, nc, 1, time.Hour, m)
	require.True(t, m.AwaitWaiting(1, 5*time.Second), "the expiry ticker")
	got := make(answers, 1)
	require.NoError(t, a.put(t.Context(), "puts.a", "a", nil, nil, noCheck, got.done("a")))
	s.next(t)
	m.Advance(time.Hour - time.Millisecond)
	var x answerOf
	past := 0       // advances past the deadline before the answer
	for range 100 { // each Advance fires the ticker once, which the expiry takes in its time
		select {
		case x = <-got:
		case <-time.After(20 * time.Millisecond):
			m.Advance(time.Hour / 8)
			past++
			continue
		}
		break
	}
	require.ErrorIs(t, x.err, natsjs.ErrAsyncPublishTimeout, "answered once the clock passed its deadline")
	assert.Positive(t, past, "not before")
}

func TestAsyncPutsBlockOnAFullWindowUntilTheContextEnds(t *testing.T) {
	s, srv := newSink(t)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	a, _ := newTestPuts(t, nc, 2, time.Hour)
	got := make(answers, 4)
	require.NoError(t, a.put(t.Context(), "puts.a", "a", nil, nil, noCheck, got.done("a")))
	require.NoError(t, a.put(t.Context(), "puts.b", "b", nil, nil, noCheck, got.done("b")))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err = a.put(ctx, "puts.c", "c", nil, nil, noCheck, got.done("c"))
	require.ErrorIs(t, err, kv.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Acknowledging one frees its slot.
	s.ack(t, s.next(t), 1)
	assert.Equal(t, "a", got.next(t).key)
	require.NoError(t, a.put(t.Context(), "puts.c", "c", nil, nil, noCheck, got.done("c")))
}

func TestAsyncPutsFailWhenTheConnectionIsLostOrTheStoreCloses(t *testing.T) {
	s, srv := newSink(t)
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	a, downs := newTestPuts(t, nc, 4, time.Hour)
	got := make(answers, 4)
	require.NoError(t, a.put(t.Context(), "puts.a", "a", nil, nil, noCheck, got.done("a")))
	s.next(t)

	// The server drops the putting connection: the acknowledgement, if
	// one came, would go to the connection that is gone.
	cid, err := nc.GetClientID()
	require.NoError(t, err)
	require.NoError(t, srv.DisconnectClientByID(cid))
	x := got.next(t)
	assert.Equal(t, "a", x.key)
	require.ErrorIs(t, x.err, kv.ErrUnavailable)
	require.ErrorIs(t, x.err, nats.ErrDisconnected)
	assert.Positive(t, downs.Load())

	// Close answers what is still in flight.
	select {
	case <-reconnected:
	case <-time.After(5 * time.Second):
		t.Fatal("no reconnect")
	}
	require.NoError(t, a.put(t.Context(), "puts.b", "b", nil, nil, noCheck, got.done("b")))
	s.next(t)
	a.close()
	x = got.next(t)
	assert.Equal(t, "b", x.key)
	require.ErrorIs(t, x.err, errStoreClosed)
	require.ErrorIs(t, a.put(t.Context(), "puts.c", "c", nil, nil, noCheck, got.done("c")), errStoreClosed)
}
