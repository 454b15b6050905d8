package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testActor is an actor made of functions: a nil run waits for its
// context, a nil stop does nothing.
type testActor struct {
	run  func(ctx context.Context) error
	stop func(ctx context.Context) error
}

func (a testActor) Run(ctx context.Context) error {
	if a.run == nil {
		<-ctx.Done()
		return nil
	}
	return a.run(ctx)
}

func (a testActor) Stop(ctx context.Context) error {
	if a.stop == nil {
		return nil
	}
	return a.stop(ctx)
}

// journal records, in order, what the actors of a test did.
type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(line string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, line)
}

func (j *journal) all() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.lines...)
}

func TestGroupStopsEveryActorOnTheFirstFailure(t *testing.T) {
	var g group
	var j journal
	boom := errors.New("boom")
	for _, name := range []string{"a", "b"} {
		g.add(name, testActor{stop: func(context.Context) error { j.add(name); return nil }})
	}
	g.add("failing", testActor{run: func(context.Context) error { return boom }})
	g.wait(context.Background()) // the failure ends the wait
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := g.stop(ctx)
	require.ErrorIs(t, err, boom)
	assert.Equal(t, "failing: boom", err.Error(), "the failure, named after its actor, and nothing else")
	assert.Equal(t, []string{"b", "a"}, j.all(), "every other actor stopped, in the reverse order of add")
	assert.NoError(t, g.stop(ctx), "a second stop does nothing")
}

func TestGroupStopsActorsOneAtATimeInReverseOrderByOneDeadline(t *testing.T) {
	var g group
	var j journal
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	want, _ := ctx.Deadline()
	for _, name := range []string{"server", "conn", "worker"} {
		g.add(name, testActor{
			run: func(rctx context.Context) error {
				<-rctx.Done()
				j.add(name + " ran")
				return nil
			},
			stop: func(sctx context.Context) error {
				got, ok := sctx.Deadline()
				assert.True(t, ok && got.Equal(want), "%s stops by the one deadline", name)
				j.add(name + " stopped")
				return nil
			},
		})
	}
	require.NoError(t, g.stop(ctx))
	assert.Equal(t, []string{"worker ran", "worker stopped", "conn ran", "conn stopped", "server ran", "server stopped"}, j.all(),
		"each Run returns before its Stop, and each actor stops before the one added before it is told to")
}

func TestGroupGivesUpOnAStuckActorAtTheDeadline(t *testing.T) {
	var g group
	var j journal
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	g.add("server", testActor{stop: func(ctx context.Context) error {
		assert.Error(t, ctx.Err(), "told to stop after the deadline")
		j.add("server stopped")
		return nil
	}})
	g.add("stuck", testActor{stop: func(context.Context) error { <-release; return nil }})
	g.add("failing", testActor{run: func(context.Context) error { return errors.New("boom") }})
	g.wait(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := g.stop(ctx)
	assert.ErrorIs(t, err, errActorsStuck)
	assert.Contains(t, err.Error(), "stuck: did not stop in time")
	assert.Contains(t, err.Error(), "server: did not stop in time", "not waited for")
	require.Eventually(t, func() bool { return len(j.all()) == 1 }, 5*time.Second, time.Millisecond,
		"the actors after the stuck one are still told to stop")
}

func TestGroupStopsWhatWasAddedWhenNoRunReturned(t *testing.T) {
	var g group
	var j journal
	g.add("conn", testActor{stop: func(context.Context) error { j.add("conn"); return nil }})
	require.NoError(t, g.stop(context.Background()), "Close after a failed Open")
	assert.Equal(t, []string{"conn"}, j.all())

	var empty group
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	empty.wait(ctx) // returns: ctx ended, with no actor
	assert.NoError(t, empty.stop(ctx))
}
