package consumer_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// These tests run the worker on a Replica of the shared in-memory store:
// the intake pipeline, whose reports the state answers in arrival order
// once each write is stored and applied by the worker's watch.

// startReplica runs a Replica of mem until it is loaded; Cleanup stops it,
// after the worker (cleanups run last first).
func startReplica(tb testing.TB, mem *kv.SharedMemory, window int) *state.Replica {
	tb.Helper()
	r, err := state.NewReplica(mem, state.ReplicaOptions{Window: window, ApplyTimeout: wait})
	require.NoError(tb, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	tb.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			assert.NoError(tb, err)
		case <-time.After(wait):
			tb.Error("the replica did not stop")
		}
	})
	lctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(tb, r.WaitLoaded(lctx))
	return r
}

// replies subscribes to inbox.* and returns the channel of the replies.
func replies(tb testing.TB, nc *nats.Conn) chan *nats.Msg {
	tb.Helper()
	ch := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe("inbox.*", ch)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// nextReply returns the next reply, within wait.
func nextReply(tb testing.TB, ch chan *nats.Msg) *nats.Msg {
	tb.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(wait):
		tb.Fatal("no reply")
		return nil
	}
}

// sendReports sends reports of nodes 1 to n as requests, answered on
// inbox.0 to inbox.n-1, without waiting.
func sendReports(tb testing.TB, nc *nats.Conn, n int) {
	tb.Helper()
	for i := range n {
		require.NoError(tb, nc.PublishRequest(subject(uint64(i+1)), "inbox."+strconv.Itoa(i),
			report(uint64(i+1), flow(flowstate.FlowID(i+1), 1, 1))))
	}
}

// received waits until the worker has taken n reports from its
// subscription.
func received(tb testing.TB, w *consumer.Worker, n uint64) {
	tb.Helper()
	require.Eventually(tb, func() bool { return w.Stats().Received == n }, wait, time.Millisecond,
		"the worker takes %d reports", n)
}

func TestPipelineAnswersInArrivalOrder(t *testing.T) {
	srv := startServer(t, nil)
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	f := startSharedOn(t, srv, startReplica(t, mem, 64), consumer.Config{})
	ch := replies(t, f.nc)

	// The watch is held, so that every report waits in the window; the
	// bad ones are answered in their turn, not before.
	mem.StallWatches()
	const n = 20
	bad := map[int]bool{4: true, 11: true}
	for i := range n {
		body := report(uint64(i+1), flow(flowstate.FlowID(i+1), 1, int64(i)))
		if bad[i] {
			body = report(999, flow(1, 1, 1)) // not the subject's node
		}
		require.NoError(t, f.nc.PublishRequest(subject(uint64(i+1)), "inbox."+strconv.Itoa(i), body))
	}
	received(t, f.worker, n)
	select {
	case m := <-ch:
		t.Fatalf("answered %s before its write was applied", m.Subject)
	default:
	}
	mem.ResumeWatches()
	var last uint64
	for i := range n {
		m := nextReply(t, ch)
		require.Equal(t, "inbox."+strconv.Itoa(i), m.Subject, "answers in arrival order")
		if bad[i] {
			assert.Equal(t, strconv.Itoa(protocol.CodeBadRequest), m.Header.Get(protocol.HeaderErrorCode))
			continue
		}
		require.Empty(t, m.Header.Get(protocol.HeaderError), "report %d", i)
		rev, err := strconv.ParseUint(m.Header.Get(protocol.HeaderRevision), 10, 64)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, rev, last)
		last = rev
	}
	_, rev, _ := get(t, f.nc, false)
	assert.GreaterOrEqual(t, rev, last, "a get after the acks includes them")
}

func TestPipelineFullWindowBlocksIntake(t *testing.T) {
	srv := startServer(t, nil)
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	f := startSharedOn(t, srv, startReplica(t, mem, 2), consumer.Config{})
	ch := replies(t, f.nc)

	mem.StallWatches()
	const n = 6
	sendReports(t, f.nc, n)
	// Two reports wait in the window for their answers, one in the blocked
	// intake; the others wait in the subscription.
	received(t, f.worker, 3)
	// A nodes request is answered on the same connection: the reports sent
	// before it have reached the worker, and still only 4 were taken.
	msg, err := f.nc.Request("flow.state.nodes", nil, wait)
	require.NoError(t, err)
	require.Empty(t, msg.Header.Get(protocol.HeaderError))
	assert.Equal(t, uint64(3), f.worker.Stats().Received, "a full window blocks intake")
	assert.Empty(t, ch, "nothing answered before its write is applied")

	mem.ResumeWatches()
	for i := range n {
		m := nextReply(t, ch)
		require.Equal(t, "inbox."+strconv.Itoa(i), m.Subject)
		require.Empty(t, m.Header.Get(protocol.HeaderError), "report %d", i)
	}
}

func TestPipelineAnswersUnavailableForWhatWasNotStored(t *testing.T) {
	srv := startServer(t, nil)
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	f := startSharedOn(t, srv, startReplica(t, mem, 8), consumer.Config{})
	ack(t, f.nc, 1, report(1, flow(1, 1, 1)))
	mem.SetUnavailable(true)
	msg := send(t, f.nc, subject(1), report(1, flow(1, 2, 2)))
	assert.Equal(t, strconv.Itoa(protocol.CodeUnavailable), msg.Header.Get(protocol.HeaderErrorCode))
	mem.SetUnavailable(false)
	mem.LoseAcks(1)
	msg = send(t, f.nc, subject(2), report(2, flow(2, 2, 2)))
	assert.Equal(t, strconv.Itoa(protocol.CodeUnavailable), msg.Header.Get(protocol.HeaderErrorCode),
		"a write whose outcome is unknown is not acknowledged")
	ack(t, f.nc, 1, report(1, flow(1, 3, 3)))
	body, _, _ := get(t, f.nc, false)
	assert.NotEmpty(t, body)
	assert.Equal(t, uint64(2), f.worker.Stats().Acked)
}

func TestPipelineShutdownAnswersWhatIsInFlight(t *testing.T) {
	srv := startServer(t, nil)
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	f := startSharedOn(t, srv, startReplica(t, mem, 8), consumer.Config{})
	ch := replies(t, f.nc)
	mem.StallWatches()
	defer mem.ResumeWatches()
	const n = 3
	sendReports(t, f.nc, n)
	received(t, f.worker, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, f.worker.Shutdown(ctx), "the writes the watch never applies do not hold shutdown past its bound")
	for i := range n {
		m := nextReply(t, ch)
		require.Equal(t, "inbox."+strconv.Itoa(i), m.Subject)
		assert.Equal(t, strconv.Itoa(protocol.CodeUnavailable), m.Header.Get(protocol.HeaderErrorCode),
			"stored but not applied by the worker's watch: not acknowledged")
	}
}
