package client

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"flowstate/codec"
	"flowstate/flowstate"
)

// DefaultLoadConcurrency is the most reports Load keeps in flight when
// LoadConfig.Concurrency is zero.
const DefaultLoadConcurrency = 256

// LoadConfig describes a load: simulated flownodes sending reports as
// requests.
type LoadConfig struct {
	// Nodes is the number of simulated flownodes, with node ids 0 to
	// Nodes-1.
	Nodes int
	// Flows is the number of flows per node: node i owns the flow ids
	// i*Flows+1 to i*Flows+Flows. 0 sends empty reports.
	Flows int
	// Rate is the total number of reports per second, spread over the
	// nodes; 0 sends as fast as Concurrency allows. Reports follow a fixed
	// schedule: a load that fell behind it (a slow worker, too little
	// Concurrency) catches up as fast as it can.
	Rate float64
	// Duration is how long reports are sent.
	Duration time.Duration
	// Concurrency is the most reports in flight; 0 means
	// DefaultLoadConcurrency. A node never has more than one report in
	// flight, so that its last acknowledged report is the one applied last:
	// no more than Nodes reports are in flight.
	Concurrency int
	// Progress, if set, is called about once a second while the load runs
	// and once at its end, from a goroutine of Load's.
	Progress func(LoadProgress)
}

// Validate reports the first invalid field.
func (c LoadConfig) Validate() error {
	switch {
	case c.Nodes <= 0:
		return fmt.Errorf("client: load: nodes %d must be positive", c.Nodes)
	case c.Flows < 0:
		return fmt.Errorf("client: load: flows %d is negative", c.Flows)
	case uint64(c.Nodes)*uint64(c.Flows) > math.MaxUint32:
		return fmt.Errorf("client: load: %d nodes x %d flows exceed the uint32 flow ids", c.Nodes, c.Flows)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("client: load: rate %v must be a finite number, 0 or more", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("client: load: duration %v must be positive", c.Duration)
	case c.Concurrency < 0:
		return fmt.Errorf("client: load: concurrency %d is negative", c.Concurrency)
	}
	return nil
}

// LoadProgress is how far a load has got.
type LoadProgress struct {
	Elapsed time.Duration
	Sent    uint64 // reports sent
	Acked   uint64 // reports acknowledged
	Failed  uint64 // reports rejected, timed out or not sent
	// Rate is the acknowledgements per second since the previous call; on
	// the last call, over the whole load.
	Rate float64
}

// LoadResult is what a load did and what the worker ended with.
type LoadResult struct {
	Sent   uint64 // reports sent
	Acked  uint64 // reports acknowledged
	Failed uint64 // reports rejected, timed out or not sent
	// FirstError is the error of the first failed report; nil if none.
	FirstError error
	// Elapsed is the time from the first send to the last reply.
	Elapsed time.Duration
	// Latency of the acknowledgements.
	P50, P99, Max time.Duration
	// Final is the aggregate a get returned after the last reply.
	Final State
	// Diff lists how Final differs from each node's last acknowledged
	// report (at most a few lines, the last one counting the rest); empty
	// when they match exactly.
	Diff []string
}

// AppliedRate returns the acknowledged reports per second.
func (r LoadResult) AppliedRate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Acked) / r.Elapsed.Seconds()
}

// Exact reports whether the final aggregate is exactly the union of each
// node's last acknowledged report.
func (r LoadResult) Exact() bool { return len(r.Diff) == 0 }

// Load runs cfg against the worker: each simulated node sends its report as
// a request, the nodes together at cfg.Rate, for cfg.Duration. Every report
// of node i names all of its flows, with a state size that changes with
// each report, the time of sending as last execution time and the start of
// the load as start time. Afterwards it gets the aggregate and compares it
// with each node's last acknowledged report (a node whose last report
// failed may also show that one, as it may have been applied).
//
// It returns an error when cfg is invalid, or when no worker answers the
// get taken before the load or the one after it. Failed reports are
// counted, not returned. When ctx ends, Load stops sending, waits for the
// replies in flight (bounded by the client's timeout) and checks as usual.
func (c *Client) Load(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	if err := cfg.Validate(); err != nil {
		return LoadResult{}, err
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultLoadConcurrency
	}
	// Replies in flight are awaited even after ctx ends, so that what each
	// node sent last is known.
	bg := context.WithoutCancel(ctx)
	if _, err := c.Get(ctx); err != nil {
		return LoadResult{}, fmt.Errorf("client: load: before the load: %w", err)
	}
	l := &load{c: c, cfg: cfg, nodes: make([]simNode, cfg.Nodes)}
	res := l.run(ctx, bg)
	final, err := c.Get(bg)
	if err != nil {
		return res, fmt.Errorf("client: load: after the load: %w", err)
	}
	res.Final = final
	res.Diff = l.diff(final.Value)
	return res, nil
}

// load is one run of Load.
type load struct {
	c     *Client
	cfg   LoadConfig
	start time.Time
	nodes []simNode // each owned by one lane while the load runs

	sent, acked, failed atomic.Uint64
	firstErr            sync.Once
	err                 error
	lat                 histogram
}

// simNode is what one simulated node sent.
type simNode struct {
	seq        uint64 // reports sent
	acked      bool   // a report was acknowledged: the one of ackedSeq and ackedTime
	ackedSeq   uint64
	ackedTime  int64
	lastFailed bool // the last report sent failed: the one of seq and sentTime
	sentTime   int64
}

// run sends until the duration is over or ctx ends, then waits for the
// replies in flight.
func (l *load) run(ctx, bg context.Context) LoadResult {
	l.start = time.Now()
	end := l.start.Add(l.cfg.Duration)
	lanes := min(l.cfg.Concurrency, l.cfg.Nodes)
	var interval time.Duration
	if l.cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / l.cfg.Rate)
	}
	var tokens atomic.Int64
	var wg sync.WaitGroup
	for lane := range lanes {
		wg.Go(func() { l.lane(ctx, bg, lane, lanes, end, interval, &tokens) })
	}
	done := make(chan struct{})
	progressDone := make(chan struct{})
	go l.report(done, progressDone)
	wg.Wait()
	elapsed := time.Since(l.start)
	close(done)
	<-progressDone
	return LoadResult{
		Sent:       l.sent.Load(),
		Acked:      l.acked.Load(),
		Failed:     l.failed.Load(),
		FirstError: l.err,
		Elapsed:    elapsed,
		P50:        l.lat.quantile(0.50),
		P99:        l.lat.quantile(0.99),
		Max:        time.Duration(l.lat.max.Load()),
	}
}

// lane sends the reports of nodes lane, lane+lanes, ... in turn, one at a
// time, each when the shared schedule lets it.
func (l *load) lane(ctx, bg context.Context, lane, lanes int, end time.Time, interval time.Duration, tokens *atomic.Int64) {
	var buf []byte
	var flows []flowstate.Flow
	var timer *time.Timer
	for i := lane; ; i += lanes {
		if i >= l.cfg.Nodes {
			i = lane
		}
		if interval > 0 {
			due := l.start.Add(time.Duration(tokens.Add(1)-1) * interval)
			if !due.Before(end) {
				return
			}
			if wait := time.Until(due); wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-ctx.Done():
					timer.Stop()
					return
				case <-timer.C:
				}
			}
		}
		now := time.Now()
		if ctx.Err() != nil || !now.Before(end) {
			return
		}
		n := &l.nodes[i]
		n.seq++
		n.sentTime = now.UnixMilli()
		flows = l.flows(flows[:0], i, n.seq, n.sentTime)
		buf = codec.AppendReport(buf[:0], &codec.Report{NodeID: uint64(i), Flows: flows})
		l.sent.Add(1)
		_, err := l.c.sendBody(bg, uint64(i), buf)
		if err != nil {
			n.lastFailed = true
			l.failed.Add(1)
			l.firstErr.Do(func() { l.err = err })
			continue
		}
		l.lat.record(time.Since(now))
		l.acked.Add(1)
		n.acked, n.ackedSeq, n.ackedTime, n.lastFailed = true, n.seq, n.sentTime, false
	}
}

// flows appends the flows of report seq of node i, sent at t (unix ms).
func (l *load) flows(dst []flowstate.Flow, i int, seq uint64, t int64) []flowstate.Flow {
	base := flowstate.FlowID(i * l.cfg.Flows)
	startMs := l.start.UnixMilli()
	for k := 1; k <= l.cfg.Flows; k++ {
		dst = append(dst, flowstate.Flow{
			ID:           base + flowstate.FlowID(k),
			Has:          flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
			StateSize:    uint64(k)<<10 + seq,
			LastExecTime: t,
			StartTime:    startMs,
		})
	}
	return dst
}

// report calls cfg.Progress once a second until done is closed, then once
// more, and closes finished.
func (l *load) report(done <-chan struct{}, finished chan<- struct{}) {
	defer close(finished)
	if l.cfg.Progress == nil {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prevAcked, prevAt := uint64(0), l.start
	call := func(final bool) {
		now := time.Now()
		acked := l.acked.Load()
		if final {
			prevAcked, prevAt = 0, l.start
		}
		rate := 0.0
		if dt := now.Sub(prevAt).Seconds(); dt > 0 {
			rate = float64(acked-prevAcked) / dt
		}
		prevAcked, prevAt = acked, now
		l.cfg.Progress(LoadProgress{Elapsed: now.Sub(l.start), Sent: l.sent.Load(), Acked: acked, Failed: l.failed.Load(), Rate: rate})
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
