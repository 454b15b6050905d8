package client

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// What a watch holds back: the deltas waiting for the loop, bounded in
// bytes, and the floor between two snapshots.

// pendingQueue holds the deltas between the subscription's callback and
// the loop, bounded in bytes: past the bound it drops them all, and the
// loop takes a snapshot.
type pendingQueue struct {
	ready chan struct{} // a delta is waiting; capacity 1

	mu       sync.Mutex // guards the fields below
	msgs     []*nats.Msg
	head     int // msgs[head:] wait
	bytes    int // of msgs[head:]
	limit    int
	overflow bool // deltas were dropped since the last call of dropped
}

func newPendingQueue(limit int) *pendingQueue {
	return &pendingQueue{ready: make(chan struct{}, 1), limit: limit}
}

// msgSize is what msg holds in memory, near enough: its body, subjects and
// headers.
func msgSize(msg *nats.Msg) int {
	n := len(msg.Data) + len(msg.Subject) + len(msg.Reply)
	for k, vs := range msg.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// put queues msg, or drops every delta waiting and msg when they would
// pass the bound; it runs on the subscription's goroutine.
func (q *pendingQueue) put(msg *nats.Msg) {
	n := msgSize(msg)
	q.mu.Lock()
	if q.bytes+n > q.limit {
		q.msgs, q.head, q.bytes, q.overflow = nil, 0, 0, true
	} else {
		q.msgs = append(q.msgs, msg)
		q.bytes += n
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop removes and returns the oldest delta waiting.
func (q *pendingQueue) pop() (*nats.Msg, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.msgs) {
		return nil, false
	}
	msg := q.msgs[q.head]
	q.msgs[q.head] = nil
	q.head++
	q.bytes -= msgSize(msg)
	if q.head == len(q.msgs) {
		q.msgs, q.head = q.msgs[:0], 0
	}
	return msg, true
}

// waiting reports whether a delta waits.
func (q *pendingQueue) waiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.head < len(q.msgs)
}

// dropped reports whether deltas were dropped since its last call.
func (q *pendingQueue) dropped() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.overflow
	q.overflow = false
	return d
}

// snapshotGate keeps the least interval between two snapshots of a watch.
type snapshotGate struct {
	interval time.Duration
	last     time.Time // when the last snapshot was asked for
}

// wait waits until the next snapshot may be taken; it reports false when
// ctx ended or closed fired first.
func (g *snapshotGate) wait(ctx context.Context, closed <-chan nats.SubStatus) bool {
	if d := time.Until(g.last.Add(g.interval)); !g.last.IsZero() && d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-closed:
			return false
		case <-t.C:
		}
	}
	g.last = time.Now()
	return true
}
