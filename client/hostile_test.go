package client_test

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
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
	"github.com/flowstate-io/flowstate/protocol"
)

// A peer allowed to publish on the state subjects, answering gets or
// publishing updates with bytes of its own choosing: what the clients do
// with what it sends.

// forgedDelta returns a delta on flow.state.delta of version v and base
// setting flow id to size, as a peer that is not the worker would publish.
func forgedDelta(v flowstate.Version, base uint64, id flowstate.FlowID, size uint64) *nats.Msg {
	msg := nats.NewMsg(protocol.DefaultPrefix + ".state.delta")
	msg.Header.Set(protocol.HeaderEpoch, v.Epoch)
	msg.Header.Set(protocol.HeaderRevision, strconv.FormatUint(v.Revision, 10))
	msg.Header.Set(protocol.HeaderBaseRevision, strconv.FormatUint(base, 10))
	msg.Data = codec.AppendDelta(nil, base, []flowstate.Flow{{ID: id, StateSize: size, Has: flowstate.HasStateSize}})
	return msg
}

// forgedFull returns a full update on flow.state of version v setting flow
// id to size.
func forgedFull(v flowstate.Version, id flowstate.FlowID, size uint64) *nats.Msg {
	msg := nats.NewMsg(protocol.DefaultPrefix + ".state")
	msg.Header.Set(protocol.HeaderEpoch, v.Epoch)
	msg.Header.Set(protocol.HeaderRevision, strconv.FormatUint(v.Revision, 10))
	msg.Data = codec.AppendAggregate(nil, []flowstate.Flow{{ID: id, StateSize: size, Has: flowstate.HasStateSize}})
	return msg
}

func TestWatchIsNotFrozenByAForgedRevision(t *testing.T) {
	for _, tc := range []struct {
		mode  client.WatchMode
		ahead uint64
	}{{client.WatchAuto, 5}, {client.WatchAuto, math.MaxUint64}, {client.WatchV1, 5}, {client.WatchV1, math.MaxUint64}} {
		ahead := tc.ahead
		t.Run(fmt.Sprint(tc.mode, "/", ahead), func(t *testing.T) {
			srv := startServer(t)
			startWorker(t, srv, consumer.Config{})
			c := newClient(t, srv, client.Options{WatchMode: tc.mode})
			first := mustSend(t, c, report(1, 10, 1000, 1))
			w := startWatch(t, c, nil)
			w.until(t, func(s client.State) bool { return s.Version == first })

			// Flow 1 at 999999, at a revision the worker never reached
			// (math.MaxUint64: revision first.Revision+ahead saturates).
			rev := first.Revision + ahead
			if rev < first.Revision {
				rev = math.MaxUint64
			}
			forger := connect(t, srv)
			forged := flowstate.Version{Epoch: first.Epoch, Revision: rev}
			msg := forgedDelta(forged, first.Revision, 1, 999999)
			if tc.mode == client.WatchV1 {
				msg = forgedFull(forged, 1, 999999)
			}
			require.NoError(t, forger.PublishMsg(msg))
			require.NoError(t, forger.Flush())

			// The worker's next revisions reach the watch, with the
			// worker's value of flow 1, not the forged one.
			second := mustSend(t, c, report(1, 7, 2000, 1))
			s := w.until(t, func(s client.State) bool { return s.Version == second })
			assert.Equal(t, uint64(7), s.Value.StateSize[1], "the worker's value at %s", describe(s))
		})
	}
}

// heapInUse returns the bytes of the heap in use after two collections:
// the second frees what the first left in sync.Pools (the embedded
// server's buffers among them).
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func TestWatchBuffersAFloodOfUpdatesWithinItsByteBound(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	nc := connect(t, srv)
	c, err := client.New(nc, client.Options{})
	require.NoError(t, err)
	first := mustSend(t, c, report(1, 10, 1000, 1))

	// The loop body blocks on its second state until release: meanwhile
	// the flood waits in the watch's buffer.
	release := make(chan struct{})
	w := startWatch(t, c, func(n int) {
		if n == 1 {
			<-release
		}
	})
	w.until(t, func(s client.State) bool { return s.Version == first })
	before := heapInUse()

	// 96 deltas of 512 KiB of a foreign epoch (48 MiB): each calls for a
	// snapshot, none may be held past the bound.
	const n, size = 96, 512 << 10
	forger := connect(t, srv)
	body := make([]byte, size)
	for i := range n {
		msg := nats.NewMsg(protocol.DefaultPrefix + ".state.delta")
		msg.Header.Set(protocol.HeaderEpoch, "forged")
		msg.Header.Set(protocol.HeaderRevision, strconv.Itoa(i+1))
		msg.Header.Set(protocol.HeaderBaseRevision, "0")
		msg.Data = body
		require.NoError(t, forger.PublishMsg(msg))
	}
	// The connection delivers in order: once this message arrived, the
	// flood has reached the watch's subscription.
	sentinel := make(chan struct{})
	sub, err := nc.Subscribe("test.sentinel", func(*nats.Msg) { close(sentinel) })
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	require.NoError(t, forger.Publish("test.sentinel", nil))
	require.NoError(t, forger.Flush())
	select {
	case <-sentinel:
	case <-time.After(waitTimeout):
		t.Fatal("the flood did not reach the client")
	}
	held := int64(heapInUse()) - int64(before)
	assert.Less(t, held, int64(client.DefaultMaxPendingBytes+(4<<20)), "heap held by the waiting updates")

	// Once the loop goes on, the watch reaches the worker's state.
	close(release)
	second := mustSend(t, c, report(1, 7, 2000, 1))
	s := w.until(t, func(s client.State) bool { return s.Version == second })
	assert.Equal(t, uint64(7), s.Value.StateSize[1])
	select {
	case err := <-w.errs:
		assert.ErrorIs(t, err, client.ErrLimit, "the watch says that it dropped updates")
	default:
		t.Error("the watch did not say that it dropped updates")
	}
}

// fakeWorker answers every get on flow.state.get with answer, on a
// connection of its own, and counts the gets.
func fakeWorker(tb testing.TB, srv *server.Server, answer func(nc *nats.Conn, req *nats.Msg)) *atomic.Int64 {
	tb.Helper()
	nc := connect(tb, srv)
	var gets atomic.Int64
	sub, err := nc.Subscribe(protocol.DefaultPrefix+".state.get", func(req *nats.Msg) {
		gets.Add(1)
		answer(nc, req)
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(tb, nc.Flush())
	return &gets
}

// chunk returns chunk i of n of version 1 of epoch "fake", holding the
// flows from..to-1.
func chunk(subject string, i, n int, from, to flowstate.FlowID) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Header.Set(protocol.HeaderEpoch, "fake")
	msg.Header.Set(protocol.HeaderRevision, "1")
	msg.Header.Set(protocol.HeaderContentType, protocol.ContentTypeMsgpack)
	msg.Header.Set(protocol.HeaderChunk, fmt.Sprintf("%d/%d", i, n))
	flows := make([]flowstate.Flow, 0, to-from)
	for id := from; id < to; id++ {
		flows = append(flows, flowstate.Flow{ID: id, StateSize: uint64(id), Has: flowstate.HasStateSize})
	}
	msg.Data = codec.AppendAggregate(nil, flows)
	return msg
}

func TestGetOfChunksPastTheBoundsFailsAtTheBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts client.Options
	}{
		{"flows", client.Options{MaxFlows: 5000}},
		{"bytes", client.Options{MaxGetBytes: 64 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t)
			// Valid chunks of 1,000 flows each, claiming 1,048,576 of
			// them: about 12 KiB each, a gigabyte in all.
			var sent atomic.Int64
			fakeWorker(t, srv, func(nc *nats.Conn, req *nats.Msg) {
				for i := 1; i <= 200; i++ {
					from := flowstate.FlowID((i - 1) * 1000)
					if nc.PublishMsg(chunk(req.Reply, i, 1<<20, from, from+1000)) != nil {
						return
					}
					sent.Add(1)
				}
			})
			tc.opts.Timeout = waitTimeout
			c := newClient(t, srv, tc.opts)
			_, err := c.Get(testCtx(t))
			require.Error(t, err)
			assert.ErrorIs(t, err, client.ErrLimit)
			assert.NotErrorIs(t, err, nats.ErrTimeout, "the get ends at the bound, not at its timeout")
		})
	}
}

func TestAResyncStormCostsTheWorkerABoundedNumberOfGets(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	first := mustSend(t, c, report(1, 10, 1000, 1))
	// Every get the watch sends, counted beside the worker.
	counter := connect(t, srv)
	var gets atomic.Int64
	sub, err := counter.Subscribe(protocol.DefaultPrefix+".state.get", func(*nats.Msg) { gets.Add(1) })
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, counter.Flush())

	w := startWatch(t, c, nil)
	w.until(t, func(s client.State) bool { return s.Version == first })
	start, before := time.Now(), gets.Load()

	// 2,000 resync deltas and 2,000 of a foreign epoch.
	forger := connect(t, srv)
	for i := range 2000 {
		msg := forgedDelta(flowstate.Version{Epoch: first.Epoch, Revision: first.Revision + 1}, first.Revision, 1, 5)
		msg.Header.Set(protocol.HeaderResync, "1")
		require.NoError(t, forger.PublishMsg(msg))
		require.NoError(t, forger.PublishMsg(forgedDelta(flowstate.Version{Epoch: "forged", Revision: uint64(i + 1)}, 0, 1, 5)))
	}
	require.NoError(t, forger.Flush())
	second := mustSend(t, c, report(1, 7, 2000, 1))
	w.until(t, func(s client.State) bool { return s.Version == second })
	// The storm is behind the watch: the worker's next revision comes as
	// a delta.
	third := mustSend(t, c, report(1, 8, 3000, 1))
	w.until(t, func(s client.State) bool { return s.Version == third })
	elapsed := time.Since(start)

	// At most one get per interval, and the first at once.
	bound := int64(elapsed/client.DefaultSnapshotInterval) + 2
	assert.LessOrEqual(t, gets.Load()-before, bound, "gets over %v of a resync storm", elapsed)
}

func TestAServiceErrorIsCutEscapedAndItsCodeChecked(t *testing.T) {
	srv := startServer(t)
	// A reason of 900 KB that starts with ANSI escapes and a BEL, and a
	// code that is not a number.
	reason := "\x1b[31mred\a" + strings.Repeat("x", 900_000)
	fakeWorker(t, srv, func(nc *nats.Conn, req *nats.Msg) {
		reply := nats.NewMsg(req.Reply)
		reply.Header.Set(protocol.HeaderErrorCode, "abc")
		reply.Header.Set(protocol.HeaderError, reason)
		_ = nc.PublishMsg(reply)
	})
	c := newClient(t, srv, client.Options{})
	for name, get := range map[string]func() error{
		"Get":          func() error { _, err := c.Get(testCtx(t)); return err },
		"GetStatsJSON": func() error { _, _, err := c.GetStatsJSON(testCtx(t)); return err },
	} {
		err := get()
		var se *client.ServiceError
		require.ErrorAs(t, err, &se, name)
		assert.Equal(t, 500, se.Code, "%s: a code that is not a number is 500, anything else", name)
		assert.True(t, strings.HasPrefix(se.Reason, `\x1b[31mred\x07`), "%s: %.40q", name, se.Reason)
		assert.Less(t, len(err.Error()), 1200, name)
		assert.NotContains(t, err.Error(), "\x1b", name)
		assert.NotContains(t, err.Error(), "\a", name)
	}
}

func TestGetStatsJSONRefusesBytesThatAreNotTheView(t *testing.T) {
	for _, body := range []string{
		"not json",
		`{"state_size":{}}`,
		`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{},"last_errors":{}} trailing`,
		`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{},"last_errors":{"1":[{"time":1,"node_id":1,"message":"a"},{"time":1,"node_id":1,"message":"a"},{"time":1,"node_id":1,"message":"a"},{"time":1,"node_id":1,"message":"a"}]}}`,
	} {
		srv := startServer(t)
		fakeWorker(t, srv, func(nc *nats.Conn, req *nats.Msg) {
			reply := nats.NewMsg(req.Reply)
			reply.Header.Set(protocol.HeaderEpoch, "fake")
			reply.Header.Set(protocol.HeaderRevision, "1")
			reply.Header.Set(protocol.HeaderContentType, protocol.ContentTypeJSON)
			reply.Data = []byte(body)
			_ = nc.PublishMsg(reply)
		})
		c := newClient(t, srv, client.Options{})
		_, _, err := c.GetStatsJSON(testCtx(t))
		assert.ErrorIs(t, err, client.ErrBadReply, "%.40s", body)
	}
}

func TestAnEmptyChunkHeaderIsABadReplyNotAV1Answer(t *testing.T) {
	srv := startServer(t)
	fakeWorker(t, srv, func(nc *nats.Conn, req *nats.Msg) {
		reply := chunk(req.Reply, 1, 1, 0, 3)
		reply.Header[protocol.HeaderChunk] = []string{""}
		_ = nc.PublishMsg(reply)
	})
	c := newClient(t, srv, client.Options{})
	_, err := c.Get(testCtx(t))
	assert.ErrorIs(t, err, client.ErrBadReply)
	_, _, err = c.GetStats(testCtx(t))
	assert.ErrorIs(t, err, client.ErrBadReply)
}
