package main

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ingestOptions configure one measurement of the worker.
type ingestOptions struct {
	duration    time.Duration // of the publishing
	rate        float64       // reports/s; 0: as fast as possible
	ackClients  int
	gets        bool
	getInterval time.Duration
	perfFile    string // record the worker with perf into this file; empty: don't
}

// ingestResult is one measurement of the worker.
type ingestResult struct {
	published uint64        // reports published fire-and-forget
	counts    counters      // the worker's counts during the measurement
	elapsed   time.Duration // from the first publish to the final ack
	cpu       time.Duration // the worker's user+system CPU time meanwhile
	usage     usage         // CPU time of the test's processes and the machine meanwhile
	mem       memory        // the worker's at the end
	side      *sideClients  // ack and get latencies
	unsynced  uint64        // reports that never reached the worker (0 unless the server dropped some)
}

// rate returns the applied reports per second.
func (r ingestResult) rate() float64 { return float64(r.counts.applied) / r.elapsed.Seconds() }

// cpuPerReport returns the worker's CPU µs per applied report.
func (r ingestResult) cpuPerReport() float64 {
	return float64(r.cpu.Microseconds()) / float64(r.counts.applied)
}

// measureIngest warms the worker up with every node's report, then publishes
// p's reports round-robin for o.duration while the side clients run, then
// waits until the worker has taken everything from its subscription and
// sends one more report as a request: the worker handles its subscription in
// arrival order, so when that ack arrives every report published before it
// has been handled. Applied and dropped reports come from the worker's
// /metrics.
func measureIngest(ctx context.Context, w *workerProc, natsProc *process, url string, p *payloads, o ingestOptions) (ingestResult, error) {
	pub, err := connect(url, "loadtest-pub")
	if err != nil {
		return ingestResult{}, err
	}
	defer pub.Close()
	k, err := warmUp(ctx, pub, p)
	if err != nil {
		return ingestResult{}, fmt.Errorf("warm-up: %w", err)
	}
	before, err := scrape(ctx, w.metricsAddr)
	if err != nil {
		return ingestResult{}, err
	}
	u0, err := readUsage(w.pid(), natsProc.pid())
	if err != nil {
		return ingestResult{}, err
	}
	if o.perfFile != "" {
		perf, err := startPerf(w.pid(), o.perfFile)
		if err != nil {
			return ingestResult{}, err
		}
		defer perf.stop(syscall.SIGINT)
	}
	side, err := startSideClients(url, p, o.ackClients, o.gets, o.getInterval)
	if err != nil {
		return ingestResult{}, err
	}
	defer side.close()

	start := time.Now()
	next, err := publishFor(ctx, pub, p, k, start, o.duration, o.rate)
	side.stop()
	if err != nil {
		return ingestResult{}, err
	}
	sent := func() uint64 { return next + side.ackSent.Load() }
	unsynced, err := waitTaken(ctx, w, sent)
	if err != nil {
		return ingestResult{}, err
	}
	if err := syncReport(ctx, pub, p, next); err != nil {
		return ingestResult{}, err
	}
	end := time.Now()
	u1, err := readUsage(w.pid(), natsProc.pid())
	if err != nil {
		return ingestResult{}, err
	}
	after, err := scrape(ctx, w.metricsAddr)
	if err != nil {
		return ingestResult{}, err
	}
	mem, err := memStatus(w.pid())
	if err != nil {
		return ingestResult{}, err
	}
	side.wait(2 * time.Second)
	return ingestResult{
		published: next - k,
		counts:    after.sub(before),
		elapsed:   end.Sub(start),
		cpu:       u1.worker - u0.worker,
		usage:     u1.sub(u0),
		mem:       mem,
		side:      side,
		unsynced:  unsynced,
	}, nil
}

// warmUp publishes the first report of every node and waits until the
// worker has applied them all. It returns the next report of the
// round-robin.
func warmUp(ctx context.Context, nc *nats.Conn, p *payloads) (uint64, error) {
	last := uint64(p.nodes - 1)
	for k := range last {
		subject, body := p.at(k)
		if err := nc.Publish(subject, body); err != nil {
			return 0, err
		}
	}
	return last + 1, syncReport(ctx, nc, p, last)
}

// syncReport sends report k as a request on nc and waits for its ack. The
// worker takes its subscription's messages in arrival order, and NATS keeps
// the order of one connection's messages: when the ack arrives, every report
// nc published before has been handled.
func syncReport(ctx context.Context, nc *nats.Conn, p *payloads, k uint64) error {
	ctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	subject, body := p.at(k)
	m, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return fmt.Errorf("sync report on %s: %w", subject, err)
	}
	if e := m.Header.Get(micro.ErrorHeader); e != "" {
		return fmt.Errorf("sync report on %s rejected: %s", subject, e)
	}
	return nil
}

// waitTaken waits until the worker has taken from its subscription (handled
// or dropped as a slow consumer) as many heartbeats as sent() returns, all
// the heartbeats of this run, so that the sync report finds room and is not
// dropped itself. If the worker stops making progress for stallTimeout
// (some never reached it: the server dropped them), it returns how many are
// missing.
func waitTaken(ctx context.Context, w *workerProc, sent func() uint64) (missing uint64, err error) {
	const stallTimeout = 5 * time.Second
	deadline := time.Now().Add(drainTimeout)
	var last uint64
	lastProgress := time.Now()
	for {
		c, err := scrape(ctx, w.metricsAddr)
		if err != nil {
			return 0, err
		}
		taken, want := c.received+c.dropped, sent()
		if taken >= want {
			return 0, nil
		}
		now := time.Now()
		if taken != last {
			last, lastProgress = taken, now
		} else if now.Sub(lastProgress) > stallTimeout {
			return want - taken, nil
		}
		if now.After(deadline) {
			return 0, fmt.Errorf("the worker took %d of %d heartbeats within %v", taken, want, drainTimeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// holdResult is the worker's memory holding a scenario's reports.
type holdResult struct {
	mem      memory
	heap     uint64 // the worker's Go heap in use
	aggBytes int    // size of the msgpack aggregate a get returned
	getError string // the get's service error, if it was answered with one
}

// measureHold publishes rounds reports of every node, waits until they are
// applied, takes one get (which encodes the aggregate, as a frontend's
// would), and reads the worker's resident memory.
func measureHold(ctx context.Context, w *workerProc, url string, p *payloads, rounds int) (holdResult, error) {
	pub, err := connect(url, "loadtest-pub")
	if err != nil {
		return holdResult{}, err
	}
	defer pub.Close()
	last := uint64(rounds*p.nodes - 1)
	for k := range last {
		subject, body := p.at(k)
		if err := pub.Publish(subject, body); err != nil {
			return holdResult{}, err
		}
	}
	if err := syncReport(ctx, pub, p, last); err != nil {
		return holdResult{}, err
	}
	c, err := scrape(ctx, w.metricsAddr)
	if err != nil {
		return holdResult{}, err
	}
	if c.applied != last+1 {
		return holdResult{}, fmt.Errorf("applied %d of %d reports (dropped %d)", c.applied, last+1, c.dropped)
	}
	m, err := pub.Request(prefix+".state.get", nil, requestTimeout)
	if err != nil {
		return holdResult{}, fmt.Errorf("get: %w", err)
	}
	h := holdResult{aggBytes: len(m.Data)}
	if c, err := scrape(ctx, w.metricsAddr); err == nil {
		h.heap = c.heapInuse
	}
	if e := m.Header.Get(micro.ErrorHeader); e != "" {
		h.getError = m.Header.Get(micro.ErrorCodeHeader) + " " + e
	}
	h.mem, err = memStatus(w.pid())
	return h, err
}

// perfFile names the perf recording of a run, or "" when not recording.
func perfFile(dir, scenario string, run int) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, fmt.Sprintf("worker-%s-run%d.perf.data", scenario, run+1))
}
