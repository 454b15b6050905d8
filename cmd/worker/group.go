package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// actor is one part of the running worker. Run returns when ctx ends, or
// earlier with an error if the part fails.
type actor interface {
	Run(ctx context.Context) error
}

// actorFunc adapts a function to an actor.
type actorFunc func(ctx context.Context) error

func (f actorFunc) Run(ctx context.Context) error { return f(ctx) }

// group runs actors together, oklog/run style: the first one to return ends
// the others (their context is cancelled).
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
var errActorsStuck = errors.New("actors did not stop in time")

// run runs every actor until one returns, then cancels the others and waits
// for them at most wait. It returns the first actor's error (nil for a clean
// stop, such as a signal), named after its actor.
func (g *group) run(ctx context.Context, wait time.Duration) error {
	if len(g.actors) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(g.actors))
	for i, a := range g.actors {
		go func() {
			err := a.Run(ctx)
			if err != nil {
				err = fmt.Errorf("%s: %w", g.names[i], err)
			}
			errs <- err
		}()
	}
	first := <-errs
	cancel()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for range len(g.actors) - 1 {
		select {
		case <-errs:
		case <-timer.C:
			return errors.Join(first, errActorsStuck)
		}
	}
	return first
}
