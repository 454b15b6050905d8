package consumer_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// heldShared is a Replica whose Submit keeps each report's Completion
// instead of answering it: the test answers it, or never does.
type heldShared struct {
	consumer.Shared
	held chan state.Completion
}

func (s *heldShared) Submit(_ context.Context, _ state.Report, c state.Completion) error {
	s.held <- c
	return nil
}

// heldCompletion returns the next report's Completion the state kept.
func heldCompletion(tb testing.TB, held <-chan state.Completion) state.Completion {
	tb.Helper()
	select {
	case c := <-held:
		return c
	case <-time.After(wait):
		tb.Fatal("the state was given no report")
		return nil
	}
}

const limit = 7 * time.Second

func TestSharedWorkerIsNotReadyWhileAReportWaitsPastTheLimit(t *testing.T) {
	srv := startServer(t, nil)
	clk := clock.NewManual(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	shared := &heldShared{Shared: startReplica(t, kv.NewSharedMemory(kv.SharedMemoryOptions{}), 8), held: make(chan state.Completion, 4)}
	f := startSharedOn(t, srv, shared, consumer.Config{Clock: clk, UnansweredLimit: limit})
	ch := replies(t, f.nc)

	sendReports(t, f.nc, 2)
	first, second := heldCompletion(t, shared.held), heldCompletion(t, shared.held)
	require.NoError(t, f.worker.Ready(), "a report that has just arrived")
	age, n := f.worker.OldestUnanswered()
	assert.Equal(t, time.Duration(0), age)
	assert.Equal(t, 2, n)

	clk.Advance(limit)
	require.NoError(t, f.worker.Ready(), "waited exactly the limit")
	clk.Advance(time.Millisecond)
	err := f.worker.Ready()
	require.Error(t, err, "waited past the limit")
	assert.Contains(t, err.Error(), "oldest of 2 waiting has waited 7.001s, past the 7s limit")
	assert.NotContains(t, err.Error(), "\n", "/readyz answers one line")

	first.Complete(state.MergeResult{Version: flowstate.Version{Epoch: "e", Revision: 1}}, nil)
	assert.Equal(t, "inbox.0", nextReply(t, ch).Subject)
	age, n = f.worker.OldestUnanswered()
	assert.Equal(t, limit+time.Millisecond, age, "the second report arrived with the first")
	assert.Equal(t, 1, n)
	require.Error(t, f.worker.Ready(), "the second report still waits")

	second.Complete(state.MergeResult{}, kv.ErrUnavailable)
	m := nextReply(t, ch)
	assert.Equal(t, "inbox.1", m.Subject)
	assert.Equal(t, strconv.Itoa(protocol.CodeUnavailable), m.Header.Get(protocol.HeaderErrorCode))
	assert.NoError(t, f.worker.Ready(), "an error is an answer too")
	age, n = f.worker.OldestUnanswered()
	assert.Zero(t, age)
	assert.Zero(t, n)
}

func TestLocalWorkerIsNotReadyWhileAMergeHangs(t *testing.T) {
	srv := startServer(t, nil)
	clk := clock.NewManual(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	local := newFakeState()
	entered, release := make(chan struct{}), make(chan struct{})
	local.merge = func(context.Context, uint64, []flowstate.Flow) (state.MergeResult, error) {
		close(entered)
		<-release
		return state.MergeResult{Changed: true}, nil
	}
	f := startWorkerOn(t, srv, local, consumer.Config{Clock: clk, UnansweredLimit: limit})
	ch := replies(t, f.nc)

	sendReports(t, f.nc, 1)
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the report was not merged")
	}
	clk.Advance(limit + time.Second)
	err := f.worker.Ready()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "oldest of 1 waiting has waited 8s")
	close(release)
	assert.Equal(t, "inbox.0", nextReply(t, ch).Subject)
	assert.NoError(t, f.worker.Ready())
}

func TestUnansweredLimitMustNotBeNegative(t *testing.T) {
	err := consumer.Config{UnansweredLimit: -time.Second}.Validate()
	var fe *consumer.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "UnansweredLimit", fe.Field)
}

func TestTrackingUnansweredReportsDoesNotAllocateInSteadyState(t *testing.T) {
	w, err := consumer.New(connect(t, startServer(t, nil)), state.NewManager(state.Options{}), consumer.Config{})
	require.NoError(t, err)
	now := time.Now()
	w.TakeAndAnswer(now) // the ring's first allocation
	allocs := testing.AllocsPerRun(1000, func() { w.TakeAndAnswer(now) })
	assert.Zero(t, allocs)
}
