package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/loadgen"
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
	published uint64         // reports published fire-and-forget
	acks      loadgen.Result // the ack clients' reports
	counts    counters       // the worker's counts during the measurement
	elapsed   time.Duration  // from the first publish to the final ack
	cpu       time.Duration  // the worker's user+system CPU time meanwhile
	usage     usage          // CPU time of the test's processes and the machine meanwhile
	mem       memory         // the worker's at the end
	side      *sideClients   // get latencies
	unsynced  uint64         // reports that never reached the worker (0 unless the server dropped some)
	check     aggCheck       // of the final aggregate
}

// rate returns the applied reports per second.
func (r ingestResult) rate() float64 { return float64(r.counts.applied) / r.elapsed.Seconds() }

// cpuPerReport returns the worker's CPU µs per applied report.
func (r ingestResult) cpuPerReport() float64 {
	return float64(r.cpu.Microseconds()) / float64(r.counts.applied)
}

// newPublisher returns a generator publishing the reports of sc's nodes
// over nc, for d at rate (d 0: reports reports).
func newPublisher(nc *nats.Conn, sc scenario, d time.Duration, rate float64, reports uint64) (*loadgen.Generator, error) {
	return loadgen.New(nc, loadgen.Config{Mode: loadgen.Publish, Nodes: sc.nodes, Flows: sc.flows, Health: sc.health,
		Duration: d, Rate: rate, Reports: reports, Timeout: drainTimeout})
}

// measureIngest warms the worker up with every node's report, then publishes
// sc's reports round-robin for o.duration while the side clients run, then
// waits until the worker has taken everything from its subscription and
// syncs (loadgen.Generator.Sync): when that ack arrives every report
// published before it has been handled. Applied and dropped reports come
// from the worker's /metrics. Last, it checks the aggregate.
func measureIngest(ctx context.Context, w *workerProc, natsProc *process, url string, sc scenario, o ingestOptions) (ingestResult, error) {
	pub, err := connect(url, "loadtest-pub")
	if err != nil {
		return ingestResult{}, err
	}
	defer pub.Close()
	g, err := newPublisher(pub, sc, o.duration, o.rate, 0)
	if err != nil {
		return ingestResult{}, err
	}
	if err := g.WarmUp(ctx); err != nil {
		return ingestResult{}, err
	}
	warm := uint64(sc.nodes) + 1 // and the sync report
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
	side, err := startSideClients(ctx, url, sideOptions{ackClients: o.ackClients, firstNode: sc.nodes, flows: sc.flows,
		duration: o.duration, gets: o.gets, getInterval: o.getInterval})
	if err != nil {
		return ingestResult{}, err
	}
	defer side.close()

	start := time.Now()
	res := g.Run(ctx)
	side.stop()
	if res.FirstError != nil {
		return ingestResult{}, res.FirstError
	}
	if err := ctx.Err(); err != nil {
		return ingestResult{}, err
	}
	// The ack clients' result is not waited for before the sync: a request
	// of theirs that the worker dropped as a slow consumer holds it for
	// ackTimeout (10 s), which used to land in the elapsed time of every run
	// with drops. Not counting their reports here lets waitTaken return
	// while at most that many of the publisher's are still queued, which
	// the sync report, sent after them on the same connection, waits for.
	sent := func() uint64 { return warm + res.Sent }
	unsynced, err := waitTaken(ctx, w, sent)
	if err != nil {
		return ingestResult{}, err
	}
	if err := g.Sync(ctx); err != nil {
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
	acks := side.ackResult()
	side.wait(2 * time.Second)
	r := ingestResult{
		published: res.Sent,
		acks:      acks,
		counts:    after.sub(before),
		elapsed:   end.Sub(start),
		cpu:       u1.worker - u0.worker,
		usage:     u1.sub(u0),
		mem:       mem,
		side:      side,
		unsynced:  unsynced,
	}
	var also []*loadgen.Generator
	if side.acks != nil {
		also = append(also, side.acks)
	}
	r.check, err = checkAggregate(ctx, g, r.counts.dropped+r.counts.rejected+unsynced, also...)
	return r, err
}

// aggCheck is what the check of a run's final aggregate found.
type aggCheck struct {
	checked bool
	exact   bool
	note    string // why it was not checked, or the first difference
}

func (v aggCheck) String() string {
	switch {
	case !v.checked:
		return "not checked: " + v.note
	case v.exact:
		return "exact"
	}
	return "DIFFERS: " + v.note
}

// checkAggregate checks the worker's aggregate against what g and also
// sent. With lost reports (dropped, rejected or never delivered) some
// nodes' last reports may be missing: differences are then expected and
// not an error; without, a difference is one.
func checkAggregate(ctx context.Context, g *loadgen.Generator, lost uint64, also ...*loadgen.Generator) (aggCheck, error) {
	chk, err := g.Check(ctx, also...)
	var se *client.ServiceError
	if errors.As(err, &se) {
		return aggCheck{note: fmt.Sprintf("the get answered %d %s", se.Code, se.Reason)}, nil
	}
	if err != nil {
		return aggCheck{}, err
	}
	if chk.Exact() {
		return aggCheck{checked: true, exact: true}, nil
	}
	if lost > 0 {
		return aggCheck{note: fmt.Sprintf("%d reports lost (%s)", lost, chk.Diff[0])}, nil
	}
	v := aggCheck{checked: true, note: chk.Diff[0]}
	return v, fmt.Errorf("the final aggregate differs from each node's last acknowledged report: %v", chk.Diff)
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
	check    aggCheck
}

// measureHold publishes rounds reports of every node, syncs, checks that
// they were all applied, takes one get (which encodes the aggregate, as a
// frontend's would) and checks it, and reads the worker's resident memory.
func measureHold(ctx context.Context, w *workerProc, url string, sc scenario, rounds int) (holdResult, error) {
	pub, err := connect(url, "loadtest-pub")
	if err != nil {
		return holdResult{}, err
	}
	defer pub.Close()
	want := uint64(rounds * sc.nodes)
	g, err := newPublisher(pub, sc, 0, 0, want)
	if err != nil {
		return holdResult{}, err
	}
	if res := g.Run(ctx); res.FirstError != nil {
		return holdResult{}, res.FirstError
	}
	if err := g.Sync(ctx); err != nil {
		return holdResult{}, err
	}
	c, err := scrape(ctx, w.metricsAddr)
	if err != nil {
		return holdResult{}, err
	}
	if c.applied != want+1 {
		return holdResult{}, fmt.Errorf("applied %d of %d reports (dropped %d)", c.applied, want+1, c.dropped)
	}
	n, getErr, err := getSize(ctx, pub)
	if err != nil {
		return holdResult{}, err
	}
	h := holdResult{aggBytes: n, getError: getErr}
	if c, err := scrape(ctx, w.metricsAddr); err == nil {
		h.heap = c.heapInuse
	}
	if h.check, err = checkAggregate(ctx, g, 0); err != nil {
		return h, err
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
