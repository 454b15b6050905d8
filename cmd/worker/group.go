package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// actor is one part of the running worker. Run returns early with an error
// if the part fails; when ctx ends it stops the part, within the deadline
// that stopContext(ctx) gives, and returns.
type actor interface {
	Run(ctx context.Context) error
}

// actorFunc adapts a function to an actor.
type actorFunc func(ctx context.Context) error

func (f actorFunc) Run(ctx context.Context) error { return f(ctx) }

// until is the actor that waits for the group to stop, then runs stop.
func until(stop func(ctx context.Context) error) actor {
	return actorFunc(func(ctx context.Context) error {
		<-ctx.Done()
		sctx, cancel := stopContext(ctx)
		defer cancel()
		return stop(sctx)
	})
}

// group runs actors together, oklog/run style: the first one to return
// stops the others. Unlike oklog/run it stops them one at a time, in the
// reverse order of add, so that a part stops before the parts it uses
// (the worker before its connection, the connection before the embedded
// server), all within one bound.
type group struct {
	names  []string
	actors []actor
}

func (g *group) add(name string, a actor) {
	g.names = append(g.names, name)
	g.actors = append(g.actors, a)
}

// errActorsStuck is returned when an actor does not return within the
// bound after the group was stopped.
var errActorsStuck = errors.New("did not stop in time")

// stopping holds the deadline of a group's stop, set before the first
// actor is told to stop.
type stopping struct {
	mu       sync.Mutex
	deadline time.Time
}

type stoppingKey struct{}

// stopContext returns a context that ends at the deadline of the group's
// stop (the context of Run has ended by then, so it cannot serve).
func stopContext(ctx context.Context) (context.Context, context.CancelFunc) {
	s, ok := ctx.Value(stoppingKey{}).(*stopping)
	if !ok {
		return context.WithTimeout(context.Background(), shutdownTimeout)
	}
	s.mu.Lock()
	deadline := s.deadline
	s.mu.Unlock()
	return context.WithDeadline(context.Background(), deadline)
}

// run runs every actor until one returns or ctx ends, then stops the others
// in the reverse order of add, within bound in all. It returns the first
// actor's error (nil for a clean stop, such as a signal) and those of the
// stops, each named after its actor.
func (g *group) run(ctx context.Context, bound time.Duration) error {
	st := &stopping{}
	// The actors stop one at a time, when the group cancels each: not all
	// at once when ctx ends.
	base := context.WithValue(context.WithoutCancel(ctx), stoppingKey{}, st)
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(g.actors))
	cancels := make([]context.CancelFunc, len(g.actors))
	for i, a := range g.actors {
		actx, cancel := context.WithCancel(base)
		cancels[i] = cancel
		go func() { results <- result{i, a.Run(actx)} }()
	}
	done := make([]bool, len(g.actors))
	var errs []error
	record := func(r result) {
		done[r.i] = true
		if r.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", g.names[r.i], r.err))
		}
	}
	select {
	case r := <-results:
		record(r)
	case <-ctx.Done():
	}
	st.mu.Lock()
	st.deadline = time.Now().Add(bound)
	st.mu.Unlock()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for i := len(g.actors) - 1; i >= 0; i-- {
		cancels[i]()
		for !done[i] {
			select {
			case r := <-results:
				record(r)
			case <-timer.C:
				for _, c := range cancels {
					c()
				}
				for j := range done {
					if !done[j] {
						errs = append(errs, fmt.Errorf("%s: %w", g.names[j], errActorsStuck))
					}
				}
				return errors.Join(errs...)
			}
		}
	}
	return errors.Join(errs...)
}
