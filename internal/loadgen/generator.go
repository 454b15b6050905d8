package loadgen

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/internal/latency"
	"github.com/flowstate-io/flowstate/protocol"
)

// ErrRejected is wrapped by the error of a request the worker answered with
// the service error headers.
var ErrRejected = errors.New("loadgen: the worker answered with an error")

// Generator sends the reports of one simulated fleet. Run, WarmUp, Sync and
// Check are called one at a time; each node's reports continue from one
// call to the next.
type Generator struct {
	nc    *nats.Conn
	cfg   Config
	p     *payloads
	nodes []node // each owned by one goroutine while Run runs
	next  uint64 // Publish mode: the next report of the round-robin
}

// node is what one simulated node sent.
type node struct {
	sent  uint64 // reports sent: the next report's round
	known uint64 // 1 + the round of the last report known to be handled; 0: none
	last  outcome
}

// outcome is what became of a node's last report.
type outcome uint8

const (
	handled   outcome = iota // acknowledged, or none sent
	failed                   // rejected, timed out or not sent: it may have been applied
	published                // sent without an acknowledgement; Sync settles it
)

// Result is what one Run did.
type Result struct {
	Mode   Mode
	Sent   uint64 // reports sent
	Acked  uint64 // reports acknowledged
	Failed uint64 // reports rejected, timed out or not sent
	// FirstError is the error of the first failed report; nil if none.
	FirstError error
	// Elapsed is the time from the first send to the last reply (Publish
	// mode: to the last publish).
	Elapsed time.Duration
	// Latency of the acknowledgements (Acked mode).
	Latency latency.Summary
}

// Rate returns the reports acknowledged per second (Publish mode: sent).
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	n := r.Acked
	if r.Mode == Publish {
		n = r.Sent
	}
	return float64(n) / r.Elapsed.Seconds()
}

// New returns a Generator of cfg that sends over nc, which stays the
// caller's to close. It encodes the reports ahead when they fit.
func New(nc *nats.Conn, cfg Config) (*Generator, error) {
	if nc == nil {
		return nil, errors.New("loadgen: a connection is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := protocol.SubjectsOf(cfg.Prefix)
	return &Generator{nc: nc, cfg: cfg, p: newPayloads(cfg, s.Heartbeat), nodes: make([]node, cfg.Nodes)}, nil
}

// run is the state of one Run.
type run struct {
	g     *Generator
	start time.Time
	end   time.Time // zero: no end but the reports
	every time.Duration
	limit uint64 // 0: no limit

	tickets             atomic.Uint64 // the schedule's next slot
	sent, acked, failed atomic.Uint64
	firstErr            atomic.Pointer[error]
	lat                 latency.Recorder
}

// Run sends reports until Config.Duration has passed or Config.Reports were
// sent, or ctx ends; in Acked mode it then waits for the replies in flight
// (each bounded by Config.Timeout, even after ctx ended, so that what each
// node had acknowledged last is known). Failed reports are counted in the
// Result, not returned.
func (g *Generator) Run(ctx context.Context) Result {
	r := &run{g: g, start: time.Now(), limit: g.cfg.Reports}
	if g.cfg.Duration > 0 {
		r.end = r.start.Add(g.cfg.Duration)
	}
	if g.cfg.Rate > 0 {
		r.every = time.Duration(float64(time.Second) / g.cfg.Rate)
	}
	done := make(chan struct{})
	progressDone := make(chan struct{})
	go r.progress(done, progressDone)
	if g.cfg.Mode == Publish {
		r.publish(ctx)
	} else {
		lanes := min(g.cfg.InFlight, g.cfg.Nodes)
		var wg sync.WaitGroup
		for lane := range lanes {
			wg.Go(func() { r.lane(ctx, lane, lanes) })
		}
		wg.Wait()
	}
	elapsed := time.Since(r.start)
	close(done)
	<-progressDone
	res := Result{
		Mode: g.cfg.Mode, Sent: r.sent.Load(), Acked: r.acked.Load(), Failed: r.failed.Load(),
		Elapsed: elapsed, Latency: r.lat.Summary(),
	}
	if p := r.firstErr.Load(); p != nil {
		res.FirstError = *p
	}
	return res
}

// due takes the next slot of the schedule and returns when it is due;
// false when the run is over by its limit or end.
func (r *run) due() (time.Time, bool) {
	t := r.tickets.Add(1) - 1
	if r.limit > 0 && t >= r.limit {
		return time.Time{}, false
	}
	at := r.start.Add(time.Duration(t) * r.every)
	if !r.end.IsZero() && !at.Before(r.end) {
		return time.Time{}, false
	}
	return at, true
}

// over reports whether the run's time is up at now.
func (r *run) over(now time.Time) bool { return !r.end.IsZero() && !now.Before(r.end) }

// fail counts a failed report.
func (r *run) fail(err error) {
	r.failed.Add(1)
	r.firstErr.CompareAndSwap(nil, &err)
}

// progress calls Config.Progress once a second until done is closed, then
// once more, and closes finished.
func (r *run) progress(done <-chan struct{}, finished chan<- struct{}) {
	defer close(finished)
	if r.g.cfg.Progress == nil {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	count := func() uint64 {
		if r.g.cfg.Mode == Publish {
			return r.sent.Load()
		}
		return r.acked.Load()
	}
	prev, prevAt := uint64(0), r.start
	call := func(final bool) {
		now := time.Now()
		n := count()
		if final {
			prev, prevAt = 0, r.start
		}
		rate := 0.0
		if dt := now.Sub(prevAt).Seconds(); dt > 0 {
			rate = float64(n-prev) / dt
		}
		prev, prevAt = n, now
		r.g.cfg.Progress(Progress{Elapsed: now.Sub(r.start), Sent: r.sent.Load(), Acked: r.acked.Load(), Failed: r.failed.Load(), Rate: rate})
	}
	for {
		select {
		case <-tick.C:
			call(false)
		case <-done:
			call(true)
			return
		}
	}
}
