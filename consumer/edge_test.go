package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
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

func TestCapacityRejectionAnswers507CountsLogsAndChangesNothing(t *testing.T) {
	fake := newFakeState()
	fake.merge = func(ctx context.Context, nodeID uint64, flows []flowstate.Flow) (state.MergeResult, error) {
		if nodeID == 9 {
			return state.MergeResult{}, &state.CapacityError{Limit: state.LimitMaxNodes, Max: 1, Would: 2}
		}
		return fake.Local.Merge(ctx, state.Report{Node: nodeID, Flows: flows})
	}
	var logs logSink
	f := startWorkerOn(t, startServer(t, nil), fake, consumer.Config{PublishInterval: 0, Logger: logs.logger()})
	ack(t, f.nc, 1, report(1, flow(1, 1, 1)))
	before, revBefore, _ := get(t, f.nc, true)

	msg := send(t, f.nc, subject(9), report(9, flow(2, 2, 2)))
	assert.Equal(t, "507", msg.Header.Get(protocol.HeaderErrorCode))
	assert.Contains(t, msg.Header.Get(protocol.HeaderError), "--max-nodes 1")

	after, revAfter, _ := get(t, f.nc, true)
	assert.Equal(t, string(before), string(after))
	assert.Equal(t, revBefore, revAfter)
	assert.EqualValues(t, 1, f.worker.Stats().RejectedByReason["capacity"])
	lines := logs.waitLines(t, "report rejected", 1)
	require.Len(t, lines, 1)
	assert.Equal(t, subject(9), lines[0]["subject"])
	assert.EqualValues(t, 9, lines[0]["node_id"])
	assert.Equal(t, "capacity", lines[0]["reason"])
	assert.EqualValues(t, 507, lines[0]["code"])
	assert.Contains(t, lines[0]["err"], "max-nodes")
}

// TestGetFloodIsDroppedAndALegitimateGetIsAnswered blocks the get endpoint,
// floods it past its queue, and checks that the flood was dropped and
// counted and that a get sent after it is answered.
func TestGetFloodIsDroppedAndALegitimateGetIsAnswered(t *testing.T) {
	fake := newFakeState()
	entered, gate := make(chan struct{}), make(chan struct{})
	var armed, first atomic.Bool
	fake.version = func(ctx context.Context) (flowstate.Version, error) {
		if armed.Load() && first.CompareAndSwap(false, true) {
			close(entered)
			select {
			case <-gate:
			case <-ctx.Done():
				return flowstate.Version{}, ctx.Err()
			}
		}
		return fake.Local.Version(ctx)
	}
	const queue, flood = 8, 2000
	f := startWorkerOn(t, startServer(t, nil), fake, consumer.Config{PublishInterval: 0, EndpointPendingMsgs: queue})
	updates, err := f.nc.SubscribeSync("flow.state")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())
	ack(t, f.nc, 1, report(1, flow(1, 1, 1)))
	_, err = updates.NextMsg(wait)
	require.NoError(t, err, "the report's update: the publisher has read the version")
	armed.Store(true) // from now on only gets read it

	inbox := nats.NewInbox()
	replies, err := f.nc.SubscribeSync(inbox)
	require.NoError(t, err)
	require.NoError(t, replies.SetPendingLimits(-1, -1))
	require.NoError(t, f.nc.PublishRequest("flow.state.get", inbox, nil))
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the first get did not reach the state")
	}
	base := f.wc.Stats().InMsgs
	for range flood {
		require.NoError(t, f.nc.PublishRequest("flow.state.get", inbox, nil))
	}
	require.NoError(t, f.nc.Flush())
	// Every request of the flood has reached the worker: queued or dropped.
	require.Eventually(t, func() bool { return f.wc.Stats().InMsgs >= base+flood }, wait, time.Millisecond)
	close(gate)

	// The queue holds at most `queue` gets of the flood, answered at once;
	// a get sent while they still fill it may be dropped too, so a
	// legitimate client asks again after a short timeout.
	var msg *nats.Msg
	require.Eventually(t, func() bool {
		msg, err = f.nc.Request("flow.state.get", nil, 250*time.Millisecond)
		return err == nil
	}, wait, time.Millisecond, "a get after the flood is answered")
	assert.Empty(t, msg.Header.Get(protocol.HeaderError))
	answered, _, err := replies.Pending()
	require.NoError(t, err)
	assert.LessOrEqual(t, answered, 1+queue+1, "the flood was not queued")
	assert.NotZero(t, f.worker.Stats().EndpointOverflows, "the overflow was counted")
}

func TestDeadLetterSubjectTheWorkerUsesIsRefused(t *testing.T) {
	for _, tc := range []struct {
		prefix, dead string
		ok           bool
	}{
		{"", "flow.heartbeat.5", false},
		{"", "flow.heartbeat.dead", false},
		{"", "flow.state", false},
		{"", "flow.state.delta", false},
		{"", "flow.state.get", false},
		{"", "flow.state.nodes", false},
		{"", "$SRV.PING", false},
		{"staging.flow", "staging.flow.heartbeat.1", false},
		{"staging.flow", "flow.heartbeat.1", true},
		{"", "flow.heartbeat", true},
		{"", "flow.heartbeat.5.dead", true},
		{"", "flow.rejected", true},
	} {
		t.Run(tc.prefix+"/"+tc.dead, func(t *testing.T) {
			err := consumer.Config{Prefix: tc.prefix, DeadLetterSubject: tc.dead}.Validate()
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			var invalid *consumer.FieldError
			require.ErrorAs(t, err, &invalid)
			assert.Equal(t, "DeadLetterSubject", invalid.Field)
			assert.Contains(t, invalid.Reason, "loop")
		})
	}
}

func TestEvictionSweepLogsOneLineWithTheCount(t *testing.T) {
	var logs logSink
	f := startWorkerOn(t, startServer(t, nil), newFakeState(), consumer.Config{PublishInterval: 0, Logger: logs.logger()})
	const nodes = 50
	for node := range uint64(nodes) {
		ack(t, f.nc, node, report(node, flow(flowstate.FlowID(node), 1, 1)))
	}
	f.worker.EvictSweep(time.Now().Add(time.Hour))

	assert.EqualValues(t, nodes, f.worker.Stats().Evicted)
	lines := logs.lines(t, "nodes evicted: silent longer than the node TTL")
	require.Len(t, lines, 1)
	assert.EqualValues(t, nodes, lines[0]["count"])
}

func TestLongSubjectTokensAreCutInRepliesAndLogs(t *testing.T) {
	var logs logSink
	f := startWorkerOn(t, startServer(t, nil), newFakeState(), consumer.Config{PublishInterval: 0, Logger: logs.logger()})
	token := strings.Repeat("7", 3000)
	msg := send(t, f.nc, "flow.heartbeat."+token, report(7))
	assert.Equal(t, "400", msg.Header.Get(protocol.HeaderErrorCode))
	reason := msg.Header.Get(protocol.HeaderError)
	assert.Contains(t, reason, strings.Repeat("7", 64)+"…")
	assert.NotContains(t, reason, strings.Repeat("7", 65))

	lines := logs.waitLines(t, "report rejected", 1)
	require.Len(t, lines, 1)
	assert.Equal(t, "flow.heartbeat."+strings.Repeat("7", 64)+"…", lines[0]["subject"])
	assert.NotContains(t, lines[0]["err"], strings.Repeat("7", 65))
}

func TestCutKeepsWholeRunes(t *testing.T) {
	assert.Equal(t, "abc", consumer.Cut("abc", 3))
	assert.Equal(t, "ab…", consumer.Cut("abcd", 2))
	assert.Equal(t, "é…", consumer.Cut("ééé", 3), "a cut inside a rune keeps the rune out")
}

// TestShutdownUnderAFloodReturnsAndCountsWhatItDropped holds one report in
// the store while thousands wait behind it: Shutdown stops intake, gives up
// on the held report when its apply budget is spent, drops the rest unanswered
// and counts them, and returns within its context.
func TestShutdownUnderAFloodReturnsAndCountsWhatItDropped(t *testing.T) {
	fake := newFakeState()
	entered := make(chan struct{})
	fake.merge = func(ctx context.Context, nodeID uint64, flows []flowstate.Flow) (state.MergeResult, error) {
		if nodeID != 999 {
			return fake.Local.Merge(ctx, state.Report{Node: nodeID, Flows: flows})
		}
		close(entered)
		select {
		case <-ctx.Done():
			return state.MergeResult{}, fmt.Errorf("store: %w", ctx.Err())
		case <-time.After(wait):
			return state.MergeResult{}, fmt.Errorf("store: never cancelled")
		}
	}
	f := startWorkerOn(t, startServer(t, nil), fake, consumer.Config{PublishInterval: 0})
	updates, err := f.nc.SubscribeSync("flow.state")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())
	var rev uint64
	for node := range uint64(3) {
		rev = ack(t, f.nc, node, report(node, flow(flowstate.FlowID(node), 1, 1)))
	}
	require.NoError(t, f.nc.Publish(subject(999), report(999)))
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the held report did not reach the state")
	}
	const flood = 5000
	base := f.wc.Stats().InMsgs
	for node := range uint64(flood) {
		require.NoError(t, f.nc.Publish(subject(node), report(node, flow(flowstate.FlowID(node), 2, 2))))
	}
	require.NoError(t, f.nc.Flush())
	require.Eventually(t, func() bool { return f.wc.Stats().InMsgs >= base+flood }, wait, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, f.worker.Shutdown(ctx))

	s := f.worker.Stats()
	assert.EqualValues(t, 3, s.Applied)
	assert.EqualValues(t, 3, s.Acked)
	assert.EqualValues(t, 1, s.RejectedByReason["shutting_down"], "the held report")
	assert.EqualValues(t, flood, s.DroppedAtShutdown)
	assert.EqualValues(t, 3+1+flood, s.Received)

	// The last state went out: the third report's revision.
	var last *nats.Msg
	for {
		msg, err := updates.NextMsg(0)
		if err != nil {
			break
		}
		last = msg
	}
	require.NotNil(t, last)
	assert.Equal(t, fmt.Sprint(rev), last.Header.Get(protocol.HeaderRevision))
}

// TestSharedStatePublishesAChangeMadeByAnotherWorker: a report that
// another worker of the shared store applies reaches this worker's state
// through its watch, and the state's signal makes it publish.
func TestSharedStatePublishesAChangeMadeByAnotherWorker(t *testing.T) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	f := startSharedOn(t, startServer(t, nil), startReplica(t, mem, 8), consumer.Config{PublishInterval: 0})
	updates, err := f.nc.SubscribeSync("flow.state")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())

	// Another worker's write of node 4's report.
	rev, err := mem.Put(context.Background(), flowstate.NodeKey(4), flowstate.AppendJSON(nil, []flowstate.Flow{flow(1, 3, 3)}))
	require.NoError(t, err)
	for {
		msg, err := updates.NextMsg(wait)
		require.NoError(t, err, "an update at the other worker's revision")
		if msg.Header.Get(protocol.HeaderRevision) == fmt.Sprint(rev.Seq) {
			break
		}
	}
}

func TestNodesViewTooLargeIsRefusedFromTheCountAndCachedPerVersion(t *testing.T) {
	fake := newFakeState()
	f := startWorkerOn(t, startServer(t, nil), fake, consumer.Config{PublishInterval: 0})
	ack(t, f.nc, 1, report(1, flow(1, 1, 1)))
	for range 2 {
		msg, err := f.nc.Request("flow.state.nodes", nil, wait)
		require.NoError(t, err)
		require.Empty(t, msg.Header.Get(protocol.HeaderError))
	}
	assert.EqualValues(t, 1, fake.nodeCalls.Load(), "one copy per version")
	ack(t, f.nc, 2, report(2))
	_, err := f.nc.Request("flow.state.nodes", nil, wait)
	require.NoError(t, err)
	assert.EqualValues(t, 2, fake.nodeCalls.Load(), "a new version is copied again")

	fake.size = func() (int, int) { return 10_000_000, 0 }
	msg, err := f.nc.Request("flow.state.nodes", nil, wait)
	require.NoError(t, err)
	assert.Equal(t, "413", msg.Header.Get(protocol.HeaderErrorCode))
	assert.Contains(t, msg.Header.Get(protocol.HeaderError), "node view of at least")
	assert.EqualValues(t, 2, fake.nodeCalls.Load(), "refused without a copy")
	assert.EqualValues(t, 1, f.worker.Stats().RequestErrors["nodes/too_large"])
}

// TestGetWhoseReadBarrierFailsAnswers503 shows that a worker of a shared
// store that cannot tell whether its state holds every acked report (its
// read barrier failed) answers 503 instead of a state that may be older
// than an ack, and answers again once the barrier holds.
func TestGetWhoseReadBarrierFailsAnswers503(t *testing.T) {
	var failing atomic.Bool
	shared := &barrierState{Shared: startReplica(t, kv.NewSharedMemory(kv.SharedMemoryOptions{}), 8), sync: func(context.Context) error {
		if failing.Load() {
			return fmt.Errorf("the watch has not reached revision 9: %w", context.DeadlineExceeded)
		}
		return nil
	}}
	f := startSharedOn(t, startServer(t, nil), shared, consumer.Config{PublishInterval: 0})
	ack(t, f.nc, 1, report(1, flow(1, 1, 1)))

	failing.Store(true)
	for _, chunked := range []bool{false, true} {
		msg := &nats.Msg{Subject: "flow.state.get", Header: nats.Header{}}
		if chunked {
			msg.Header.Set(protocol.HeaderChunks, "1")
		}
		reply, err := f.nc.RequestMsg(msg, wait)
		require.NoError(t, err)
		assert.Equal(t, "503", reply.Header.Get(protocol.HeaderErrorCode), "chunked %v", chunked)
		assert.Contains(t, reply.Header.Get(protocol.HeaderError), "read barrier")
		assert.Empty(t, reply.Data)
	}

	failing.Store(false)
	_, rev, _ := get(t, f.nc, true)
	assert.NotZero(t, rev)
}

// barrierState is a shared state whose read barrier a test chooses.
type barrierState struct {
	consumer.Shared
	sync func(ctx context.Context) error
}

func (s *barrierState) Sync(ctx context.Context) error { return s.sync(ctx) }
