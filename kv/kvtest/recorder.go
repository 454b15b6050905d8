package kvtest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/flowstate-io/flowstate/kv"
)

// Wait bounds every wait of the suite and of Recorder.Await.
const Wait = 10 * time.Second

// Recorder collects the events of a watch, for tests.
type Recorder struct {
	mu     sync.Mutex // guards events
	events []kv.Event
	kick   chan struct{} // signalled after each event
}

// Watch runs w.Watch in a goroutine that records every event; Cleanup
// ends the watch and requires it to return ctx's error.
func Watch(tb testing.TB, w kv.Watcher) *Recorder {
	tb.Helper()
	r := &Recorder{kick: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx, r.add) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(tb, err, context.Canceled)
		case <-time.After(Wait):
			tb.Error("Watch did not return after its context ended")
		}
	})
	return r
}

func (r *Recorder) add(e kv.Event) {
	r.mu.Lock()
	e.Value = slices.Clone(e.Value)
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Events returns a copy of the events so far.
func (r *Recorder) Events() []kv.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Await waits (at most Wait) until pred holds for the events so far, and
// returns them; it fails the test otherwise.
func (r *Recorder) Await(tb testing.TB, what string, pred func([]kv.Event) bool) []kv.Event {
	tb.Helper()
	deadline := time.After(Wait)
	for {
		events := r.Events()
		if pred(events) {
			return events
		}
		select {
		case <-r.kick:
		case <-deadline:
			tb.Fatalf("%s: not within %v; events: %v", what, Wait, events)
		}
	}
}

// Count returns how many of events are op.
func Count(events []kv.Event, op kv.Op) int {
	n := 0
	for _, e := range events {
		if e.Op == op {
			n++
		}
	}
	return n
}

// LastOf returns the last of events that is op.
func LastOf(events []kv.Event, op kv.Op) (kv.Event, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Op == op {
			return events[i], true
		}
	}
	return kv.Event{}, false
}

// Delivered reports whether events have reached sequence number seq in the
// current pass (since the last OpReset).
func Delivered(events []kv.Event, seq uint64) bool {
	for i := len(events) - 1; i >= 0 && events[i].Op != kv.OpReset; i-- {
		if events[i].Revision.Seq >= seq {
			return true
		}
	}
	return false
}

// State applies the events of the last pass (from the last OpReset) and
// returns the keys and values they give, for keys with prefix.
func State(events []kv.Event, prefix string) map[string]string {
	start := 0
	for i, e := range events {
		if e.Op == kv.OpReset {
			start = i + 1
		}
	}
	out := map[string]string{}
	for _, e := range events[start:] {
		if !strings.HasPrefix(e.Key, prefix) {
			continue
		}
		switch e.Op {
		case kv.OpPut:
			out[e.Key] = string(e.Value)
		case kv.OpDelete:
			delete(out, e.Key)
		}
	}
	return out
}
