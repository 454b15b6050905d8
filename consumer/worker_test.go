package consumer_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

func TestWorkerAcksAfterApplyingSoGetSeesTheReport(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})

	_, rev0, epoch0 := get(t, f.nc, false)
	assert.Zero(t, rev0, "nothing merged yet")

	rev1 := ack(t, f.nc, 1, report(1, flow(1, 1024, 100)))
	rev2 := ack(t, f.nc, 2, report(2, flow(2, 2048, 200)))
	assert.Greater(t, rev2, rev1)

	body, rev, epoch := get(t, f.nc, true)
	assert.Equal(t, `{"state_size":{"1":1024,"2":2048},"last_exec_time_map":{"1":100,"2":200},"start_time_map":{}}`, string(body))
	assert.Equal(t, rev2, rev)
	assert.Equal(t, epoch0, epoch)
}

func TestWorkerGetEncodesMsgpackByDefault(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	ack(t, f.nc, 1, report(1, flow(10, 5, 7), flow(2, 6, 8)))

	msg, err := f.nc.Request("flow.state.get", nil, wait)
	require.NoError(t, err)
	assert.Equal(t, protocol.ContentTypeMsgpack, msg.Header.Get(protocol.HeaderContentType))
	want := flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{2: 6, 10: 5},
		LastExecTimeMap: map[flowstate.FlowID]int64{2: 8, 10: 7},
		StartTimeMap:    map[flowstate.FlowID]int64{},
	}
	assert.Equal(t, codec.AppendAggregate(nil, want.Flows()), msg.Data)
}

// TestWorkerRejectsBadReportsWithoutChangingTheState sends each class of bad
// report as a request (answered 400 with the field) and as a publish, and
// checks that the state and its revision stay as they were.
func TestWorkerRejectsBadReportsWithoutChangingTheState(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval, MaxFlows: 3})
	ack(t, f.nc, 1, report(1, flow(1, 1024, 100)))
	before, revBefore, epoch := get(t, f.nc, true)

	for _, tc := range []struct {
		name    string
		subject string
		body    []byte
		field   string
	}{
		{"empty body", subject(7), nil, ""},
		{"not msgpack", subject(7), []byte{0xc1}, ""},
		{"json instead of msgpack", subject(7), []byte(`{"node_id":7}`), ""},
		{"truncated", subject(7), report(7, flow(1, 5, 5))[:10], ""},
		{"trailing bytes", subject(7), append(report(7), 0x00), ""},
		{"missing node_id", subject(7), []byte{0x80}, "node_id"},
		{"node mismatch", subject(7), report(8, flow(1, 5, 5)), "node_id"},
		{"non-canonical subject", "flow.heartbeat.07", report(7), "subject"},
		{"float size", subject(7), []byte("\x82\xa7node_id\x07\xaastate_size\x81\x01\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00"), "state_size[1]"},
		{"negative size", subject(7), []byte("\x82\xa7node_id\x07\xaastate_size\x81\x01\xff"), "state_size[1]"},
		{"too many flows", subject(7), report(7, flow(1, 1, 1), flow(2, 1, 1), flow(3, 1, 1), flow(4, 1, 1)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := send(t, f.nc, tc.subject, tc.body)
			assert.Equal(t, "400", msg.Header.Get("Nats-Service-Error-Code"))
			reason := msg.Header.Get("Nats-Service-Error")
			assert.NotEmpty(t, reason)
			assert.Contains(t, reason, tc.field)
			assert.Empty(t, msg.Data)

			// The same report published: the request after it on the same
			// subscription is answered only once it has been handled.
			require.NoError(t, f.nc.Publish(tc.subject, tc.body))
			send(t, f.nc, tc.subject, tc.body)

			after, revAfter, epochAfter := get(t, f.nc, true)
			assert.Equal(t, string(before), string(after))
			assert.Equal(t, revBefore, revAfter)
			assert.Equal(t, epoch, epochAfter)
		})
	}
	assert.EqualValues(t, 3*11, f.worker.Stats().Rejected)
}

func TestWorkerPublishesEveryChangeWithHeadersAtIntervalZero(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: 0})
	updates, err := f.nc.SubscribeSync("flow.state")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())

	var revs []uint64
	for i := range 5 {
		revs = append(revs, ack(t, f.nc, 1, report(1, flow(1, uint64(i), 100))))
	}
	ack(t, f.nc, 1, report(1, flow(1, 4, 100))) // the same report: no change, no update
	ack(t, f.nc, 2, report(2, flow(2, 1, 1)))   // a marker: its update comes after all others

	for i := range 5 {
		msg, err := updates.NextMsg(wait)
		require.NoError(t, err)
		assert.Equal(t, protocol.ContentTypeMsgpack, msg.Header.Get(protocol.HeaderContentType))
		assert.Equal(t, strconv.FormatUint(revs[i], 10), msg.Header.Get(protocol.HeaderRevision))
		v, err := codec.DecodeAggregate(msg.Data)
		require.NoError(t, err)
		assert.Equal(t, uint64(i), v.StateSize[1])
	}
	msg, err := updates.NextMsg(wait)
	require.NoError(t, err)
	v, err := codec.DecodeAggregate(msg.Data)
	require.NoError(t, err)
	assert.Contains(t, v.StateSize, flowstate.FlowID(2), "the unchanged report published nothing")
}

func TestWorkerPublishesTheLastStateAfterABurst(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: 50 * time.Millisecond})
	updates, err := f.nc.SubscribeSync("flow.state")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())

	var last uint64
	for i := range 200 {
		last = ack(t, f.nc, uint64(i%10), report(uint64(i%10), flow(flowstate.FlowID(i%10), uint64(i), 1)))
	}
	want, rev, _ := get(t, f.nc, false)
	require.Equal(t, last, rev)
	n := 0
	for {
		msg, err := updates.NextMsg(wait)
		require.NoError(t, err, "the trailing update never came")
		n++
		if msg.Header.Get(protocol.HeaderRevision) == strconv.FormatUint(last, 10) {
			assert.Equal(t, want, msg.Data)
			break
		}
	}
	assert.Less(t, n, 200, "updates were coalesced")
}

func TestWorkerShutdownAppliesReportsAlreadyDelivered(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	const n = 2000
	for i := range n {
		require.NoError(t, f.nc.Publish(subject(uint64(i)), report(uint64(i), flow(flowstate.FlowID(i), 1, 1))))
	}
	require.NoError(t, f.nc.Flush())
	// The server has every report; the ones it sent before the drain's
	// unsubscribe are applied before Shutdown returns.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, f.worker.Shutdown(ctx))
	s := f.worker.Stats()
	assert.EqualValues(t, n, s.Received)
	assert.EqualValues(t, n, s.Applied)
}

func TestWorkerAnswers413WhenTheAggregateExceedsMaxPayload(t *testing.T) {
	srv := startServer(t, &server.Options{MaxPayload: 2048})
	f := startWorker(t, srv, consumer.Config{PublishInterval: 0})
	for node := range uint64(10) {
		var flows []flowstate.Flow
		for i := range 20 {
			flows = append(flows, flow(flowstate.FlowID(node*100+uint64(i)), 1<<40, 1700000000000))
		}
		ack(t, f.nc, node, report(node, flows...))
	}
	msg, err := f.nc.Request("flow.state.get", nil, wait)
	require.NoError(t, err)
	assert.Equal(t, "413", msg.Header.Get("Nats-Service-Error-Code"))
	assert.Regexp(t, `^aggregate of [1-9][0-9]* bytes exceeds the connection's max payload of 2048 bytes$`, msg.Header.Get("Nats-Service-Error"))
	assert.NotZero(t, f.worker.Stats().PublishErrors, "updates too large are counted")

	// The worker still serves: a report that shrinks the aggregate fits again.
	for node := range uint64(10) {
		ack(t, f.nc, node, report(node))
	}
	body, _, _ := get(t, f.nc, true)
	assert.Equal(t, `{"state_size":{},"last_exec_time_map":{},"start_time_map":{}}`, string(body))
}

// TestWorkerSurvivesABurstBeyondItsPendingLimits sends 50,000 reports from
// 500 nodes at a worker whose pending limits are tiny: the client library
// drops what does not fit, the drops are counted, and each node's next report
// heals the state.
func TestWorkerSurvivesABurstBeyondItsPendingLimits(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval, PendingMsgs: 64, PendingBytes: 1 << 20})
	const nodes, rounds = 500, 100
	for r := range rounds {
		for node := range uint64(nodes) {
			body := report(node, flow(flowstate.FlowID(node), uint64(r), int64(r)))
			require.NoError(t, f.nc.Publish(subject(node), body))
		}
	}
	require.NoError(t, f.nc.Flush())
	// Each node's last report, acked: the state must be exactly these.
	want := flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{}, LastExecTimeMap: map[flowstate.FlowID]int64{}, StartTimeMap: map[flowstate.FlowID]int64{}}
	for node := range uint64(nodes) {
		ackWithRetry(t, f.nc, node, report(node, flow(flowstate.FlowID(node), 1000+node, 7)))
		want.StateSize[flowstate.FlowID(node)] = 1000 + node
		want.LastExecTimeMap[flowstate.FlowID(node)] = 7
	}
	body, _, _ := get(t, f.nc, true)
	assert.Equal(t, string(flowstate.AppendJSON(nil, want.Flows())), string(body))
	s := f.worker.Stats()
	assert.NotZero(t, s.Dropped, "the burst overflowed the pending limits")
	assert.GreaterOrEqual(t, s.Received+s.Dropped, uint64(nodes*rounds+nodes), "every message was either handled or counted as dropped")
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	nc := &nats.Conn{}
	mgr := state.NewManager(state.Options{})
	for _, cfg := range []consumer.Config{
		{Prefix: "a.*"}, {Prefix: "a..b"}, {Queue: "q.x"}, {PublishInterval: -1}, {MaxFlows: -1},
	} {
		_, err := consumer.New(nc, mgr, cfg)
		assert.Error(t, err, "%+v", cfg)
	}
}

// ackWithRetry sends a report as a request until it is acked, as a flownode
// whose report was dropped under load does with its next heartbeat.
func ackWithRetry(tb testing.TB, nc *nats.Conn, node uint64, body []byte) {
	tb.Helper()
	for range 30 {
		msg, err := nc.Request(subject(node), body, time.Second)
		if errors.Is(err, nats.ErrTimeout) {
			continue
		}
		require.NoError(tb, err)
		require.Empty(tb, msg.Header.Get("Nats-Service-Error"))
		return
	}
	tb.Fatalf("node %d: no ack after 30 attempts", node)
}

func TestWorkerDeadLettersRejectedReportsWithTheReason(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval, DeadLetterSubject: "flow.rejected"})
	dead, err := f.nc.SubscribeSync("flow.rejected")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())

	body := report(8, flow(1, 1, 1))
	require.NoError(t, f.nc.Publish(subject(7), body))
	msg, err := dead.NextMsg(wait)
	require.NoError(t, err)
	assert.Equal(t, body, msg.Data)
	assert.Equal(t, "subject_mismatch", msg.Header.Get(protocol.HeaderRejectKind))
	assert.Contains(t, msg.Header.Get(protocol.HeaderRejectError), "node_id")
	assert.Equal(t, subject(7), msg.Header.Get(protocol.HeaderRejectSubject))
	assert.EqualValues(t, 1, f.worker.Stats().RejectedByReason["subject_mismatch"])
}

// TestModesAreTypes: the memory backend's state and a shared store's are
// not interchangeable. A Replica is not a Local state (New would run it
// with no lease check and one blocking write per report), and a Manager is
// not a Shared one.
func TestModesAreTypes(t *testing.T) {
	local, shared := reflect.TypeFor[consumer.Local](), reflect.TypeFor[consumer.Shared]()
	assert.True(t, reflect.TypeFor[*state.Manager]().Implements(local))
	assert.False(t, reflect.TypeFor[*state.Manager]().Implements(shared))
	assert.True(t, reflect.TypeFor[*state.Replica]().Implements(shared))
	assert.False(t, reflect.TypeFor[*state.Replica]().Implements(local), "consumer.New(nc, replica, cfg) must not compile")
}

// A client's subject and the reason are outside text: the dead-letter
// headers carry them cut and escaped, so that no tool that shows them
// prints a terminal control.
func TestWorkerDeadLetterHeadersAreEscapedAndCut(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval, DeadLetterSubject: "flow.rejected"})
	dead, err := f.nc.SubscribeSync("flow.rejected")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())
	hostile := "flow.heartbeat.\x1b]0;pwned\x07\u202e\u009b" + strings.Repeat("9", 3000)
	require.NoError(t, f.nc.Publish(hostile, report(8, flow(1, 1, 1))))
	msg, err := dead.NextMsg(wait)
	require.NoError(t, err)
	for _, h := range []string{protocol.HeaderRejectSubject, protocol.HeaderRejectError} {
		v := msg.Header.Get(h)
		assert.NotEmpty(t, v, h)
		assert.LessOrEqual(t, len(v), 600, "%s is cut: %d bytes", h, len(v))
		for _, r := range v {
			assert.True(t, unicode.IsGraphic(r), "%s holds %U: %q", h, r, v)
		}
	}
	assert.True(t, strings.HasPrefix(msg.Header.Get(protocol.HeaderRejectSubject), `flow.heartbeat.\x1b]0;pwned\a\u202e\u009b999`), msg.Header.Get(protocol.HeaderRejectSubject))
}
