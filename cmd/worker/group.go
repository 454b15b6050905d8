package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// actor is one long-running part of the worker, oklog/run style: Run runs
// the part until it fails (its error) or ctx ends (nil); Stop then stops
// it by ctx's deadline, the one deadline of the group's stop. Stop is
// called once Run has returned, whether it failed or not.
type actor interface {
	Run(ctx context.Context) error
	Stop(ctx context.Context) error
}

// group runs the worker's actors. Each one runs from the moment it is
// added, so that every part Open starts is supervised, and stopped by the
// same path whether or not Open completes. The first Run to return ends
// wait; stop stops the actors one at a time, in the reverse order of add,
// so that a part stops before the parts it uses (the worker before its
// connection, the connection before the embedded server), all by one
// deadline. add, wait and stop are called from one goroutine.
type group struct {
	members []*member     // in the order of add; stop takes them off
	exited  chan struct{} // closed when the first Run returns
	once    sync.Once     // closes exited
	first   *member       // whose Run returned first, once exited is closed
}

// member is one actor of a group.
type member struct {
	name   string
	actor  actor
	cancel context.CancelFunc // ends Run's context
	ran    chan struct{}      // closed once Run has returned
	err    error              // Run's error, once ran is closed
}

// errActorsStuck is the error of an actor that did not stop by the
// deadline.
var errActorsStuck = errors.New("did not stop in time")

// add runs a, named name in errors, at once.
func (g *group) add(name string, a actor) {
	if g.exited == nil {
		g.exited = make(chan struct{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, actor: a, cancel: cancel, ran: make(chan struct{})}
	g.members = append(g.members, m)
	go func() {
		m.err = a.Run(ctx)
		close(m.ran)
		g.once.Do(func() {
			g.first = m
			close(g.exited)
		})
	}()
}

// wait returns once an actor's Run has returned, or ctx ends.
func (g *group) wait(ctx context.Context) {
	select {
	case <-g.exited: // nil before the first add: only ctx ends the wait
	case <-ctx.Done():
	}
}

// stop stops every actor, in the reverse order of add, by ctx's deadline:
// for each, it ends Run's context, waits for Run to return, then calls
// Stop. It returns the error of the first Run to return (the failure that
// stopped the group, if one did), then the others', and those of the
// stops, each named after its actor. An actor that has not stopped by the
// deadline gives errActorsStuck, and so do those after it, which are told
// to stop at once, without a wait. The actors it stopped are forgotten: a
// second stop does nothing.
func (g *group) stop(ctx context.Context) error {
	var first *member
	if g.exited != nil {
		select {
		case <-g.exited:
			first = g.first
		default:
		}
	}
	var failure error // first's
	var errs []error
	ran := func(m *member) { // m's Run has returned
		switch {
		case m.err == nil:
		case m == first:
			failure = fmt.Errorf("%s: %w", m.name, m.err)
		default:
			errs = append(errs, fmt.Errorf("%s: %w", m.name, m.err))
		}
	}
	for len(g.members) > 0 {
		m := g.members[len(g.members)-1]
		g.members = g.members[:len(g.members)-1]
		stopped := make(chan error, 1)
		go func() {
			m.cancel()
			<-m.ran
			stopped <- m.actor.Stop(ctx)
		}()
		select {
		case err := <-stopped:
			ran(m)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
			}
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("%s: %w", m.name, errActorsStuck))
			if m == first {
				ran(m)
			}
			for _, rest := range g.members {
				if rest == first {
					ran(rest)
				}
				errs = append(errs, fmt.Errorf("%s: %w", rest.name, errActorsStuck))
				go func() {
					rest.cancel()
					<-rest.ran
					_ = rest.actor.Stop(ctx)
				}()
			}
			g.members = nil
		}
	}
	return errors.Join(append([]error{failure}, errs...)...)
}
