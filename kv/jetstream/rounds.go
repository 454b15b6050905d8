package jetstream

import (
	"context"
	"sync"

	"github.com/flowstate-io/flowstate/kv"
)

// rounds shares one call of a function among the callers that wait for it
// at once. A caller joins the next round, which starts once the round in
// flight has ended, so the round a caller gets the result of started after
// the caller arrived: what a read barrier needs.
type rounds struct {
	mu      sync.Mutex
	running *round // in flight
	next    *round // joined, not started
}

type round struct {
	done    chan struct{} // closed once rev and err are set
	callers int           // that joined it
	rev     kv.Revision
	err     error
}

// do returns the result of a call of fn that started after do was called.
// The caller that starts a round runs fn on its own goroutine, without its
// context's end (fn bounds its own wait), so that the others sharing the
// round are not failed by it; a caller whose ctx ends stops waiting.
func (r *rounds) do(ctx context.Context, fn func(context.Context) (kv.Revision, error)) (kv.Revision, error) {
	r.mu.Lock()
	if r.next == nil {
		r.next = &round{done: make(chan struct{})}
	}
	mine := r.next
	mine.callers++
	for {
		if r.running == nil && r.next == mine {
			r.running, r.next = mine, nil
			r.mu.Unlock()
			mine.rev, mine.err = fn(context.WithoutCancel(ctx))
			r.mu.Lock()
			r.running = nil
			close(mine.done)
			r.mu.Unlock()
			return mine.rev, mine.err
		}
		var ahead <-chan struct{} // the round in flight before mine
		if r.running != nil && r.running != mine {
			ahead = r.running.done
		}
		r.mu.Unlock()
		select {
		case <-mine.done:
			return mine.rev, mine.err
		case <-ahead:
		case <-ctx.Done():
			return kv.Revision{}, ctx.Err()
		}
		r.mu.Lock()
	}
}
