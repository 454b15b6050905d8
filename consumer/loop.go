package consumer

import "context"

// loop is one of the worker's own goroutines (the publisher, the eviction
// loop), started and stopped the one way: it runs until stop ends its
// context, and stop waits until it has returned.
type loop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startLoop runs f on a goroutine of its own until stop.
func startLoop(f func(ctx context.Context)) *loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		f(ctx)
	}()
	return l
}

// stop ends the loop's context and waits for f to return. A nil loop (one
// never started) is stopped already.
func (l *loop) stop() {
	if l == nil {
		return
	}
	l.cancel()
	<-l.done
}
