package clock

import (
	"context"
	"sync"
	"time"
)

// WithTimeout returns a copy of parent that ends when c reads d later
// (its Err is then context.DeadlineExceeded, as a context.WithTimeout's),
// when parent ends, or when cancel is called. With Real it is
// context.WithTimeout.
//
// With another clock the context's end follows that clock's reading, which
// the system's timers know nothing of: its Deadline is parent's, so a
// library that bounds a request by the context's deadline, or by a default
// of its own when there is none (nats.go), keeps that bound, in real time.
// A context derived from it ends with it, with its Err.
func WithTimeout(parent context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := c.(realClock); ok {
		return context.WithTimeout(parent, d)
	}
	inner, cancelInner := context.WithCancelCause(parent)
	ctx := &clockCtx{parent: parent, inner: inner, cancelInner: cancelInner, done: make(chan struct{}), funcs: map[*func()]struct{}{}}
	ctx.mu.Lock()
	ctx.stopParent = context.AfterFunc(parent, func() { ctx.end(parent.Err(), context.Cause(parent)) })
	ctx.timer = c.AfterFunc(d, func() { ctx.end(context.DeadlineExceeded, context.DeadlineExceeded) })
	ctx.mu.Unlock()
	return ctx, func() { ctx.end(context.Canceled, context.Canceled) }
}

// clockCtx is WithTimeout's context on a clock other than Real. Its own
// done channel (not inner's) makes a context derived from it register
// through AfterFunc, so that it ends with this one's Err; inner holds the
// cause, for context.Cause.
type clockCtx struct {
	parent      context.Context
	inner       context.Context // parent's, canceled with this one's cause when it ends
	cancelInner context.CancelCauseFunc
	done        chan struct{}

	mu         sync.Mutex // guards the fields below
	err        error
	funcs      map[*func()]struct{} // AfterFunc's, run when it ends
	stopParent func() bool
	timer      Timer
}

func (c *clockCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *clockCtx) Done() <-chan struct{}       { return c.done }
func (c *clockCtx) Value(key any) any           { return c.inner.Value(key) }

func (c *clockCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AfterFunc runs f in its own goroutine once c ends; stop unregisters it
// and reports whether it did. The context package uses it for the
// contexts derived from c.
func (c *clockCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	key := &f
	c.funcs[key] = struct{}{}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.funcs[key]
		delete(c.funcs, key)
		return ok
	}
}

// end ends c with err (the first call wins).
func (c *clockCtx) end(err, cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	c.cancelInner(cause)
	close(c.done)
	funcs, stopParent, t := c.funcs, c.stopParent, c.timer
	c.funcs = nil
	c.mu.Unlock()
	stopParent()
	t.Stop()
	for f := range funcs {
		go (*f)()
	}
}

func (c *clockCtx) String() string { return "clock.WithTimeout" }

// Sleep waits until c reads d later, or until ctx ends: then it returns
// ctx's error.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
