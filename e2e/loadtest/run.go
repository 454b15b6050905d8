package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/internal/binaries"
	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/state"
)

// loadTest runs the scenarios against one nats-server.
type loadTest struct {
	cfg     config
	log     io.Writer
	bins    binaries.Set
	nats    *process
	natsURL string

	natsVersion string // of the nats-server binary
}

// run builds or finds the binaries, starts nats-server and runs every
// scenario, returning what was measured even on error.
func (lt *loadTest) run(ctx context.Context) ([]scenarioResult, error) {
	lt.logf("building the worker and nats-server")
	bins, cleanup, err := prepareBinaries(ctx, lt.cfg.binDir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	lt.bins = bins
	lt.natsVersion = strings.TrimPrefix(binaryVersion(ctx, bins.NATSServer), "nats-server: ")
	srv, url, err := startNATS(bins.NATSServer)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := srv.stop(syscall.SIGTERM); err != nil {
			lt.logf("%v", err)
		}
	}()
	lt.nats, lt.natsURL = srv, url
	lt.logf("nats-server listening on %s", url)
	// The runs are interleaved, round by round, so that the i-th runs of
	// two scenarios are minutes closer than a block of runs each: a ratio
	// between scenarios (pairedRatio) then sees less of the machine's drift.
	results := make([]scenarioResult, len(lt.cfg.scenarios))
	for i := range lt.cfg.runs {
		for k, sc := range lt.cfg.scenarios {
			results[k].scenario = sc
			lt.logf("scenario %s (round %d of %d): %d nodes x %d flows, reports of %d bytes", sc.label(lt.cfg), i+1, lt.cfg.runs,
				sc.nodes, sc.flows, loadgen.ReportSize(loadgen.Config{Nodes: sc.nodes, Flows: sc.flows, Health: sc.health}))
			r, err := lt.runOnce(ctx, sc, i)
			if err != nil {
				return results, fmt.Errorf("scenario %s, run %d: %w", sc.name, i+1, err)
			}
			results[k].runs = append(results[k].runs, r)
		}
	}
	return results, nil
}

// runOnce runs scenario sc once, with a fresh worker.
func (lt *loadTest) runOnce(ctx context.Context, sc scenario, i int) (r runResult, err error) {
	if err := lt.waitQuiet(ctx); err != nil {
		return r, err
	}
	if sc.kind == kindAcked {
		a, err := lt.runAcked(ctx, sc)
		if err != nil {
			return r, err
		}
		r.acked = &a
		lat := a.res.Latency
		ceiling := ""
		if a.ceiling != nil {
			ceiling = fmt.Sprintf("; JetStream's own: %s/s (%d in %s), %.2fx", count(a.ceiling.rate()), a.ceiling.completed,
				secs(a.ceiling.elapsed), a.res.Rate()/a.ceiling.rate())
		}
		lt.logf("  run %d: %s/s acked (%d acked, %d failed in %s); workers' CPU %.2f µs/ack; ack p50 %s p99 %s max %s; aggregate %s%s", i+1, count(a.res.Rate()),
			a.res.Acked, a.res.Failed, secs(a.res.Elapsed), a.cpuPerAck(), dur(lat.P50), dur(lat.P99), dur(lat.Max), a.check, ceiling)
		return r, nil
	}
	if sc.kind == kindFanout {
		f, err := lt.runFanout(ctx, sc)
		if err != nil {
			return r, err
		}
		r.fanout = &f
		lt.logf("  run %d: %s", i+1, f)
		return r, nil
	}
	if sc.kind == kindFlood {
		raw, err := measureRaw(ctx, lt.nats, lt.natsURL, sc, lt.cfg.duration)
		if err != nil {
			return r, err
		}
		r.raw = &raw
	}
	w, err := startWorker(ctx, lt.bins.Worker, lt.natsURL, append(workerLimitArgs(sc, lt.cfg.ackClients), sc.workerArgs...)...)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, lt.stopWorker(w)) }()
	o := ingestOptions{duration: lt.cfg.duration, ackClients: lt.cfg.ackClients, perfFile: perfFile(lt.cfg.perfDir, sc.name, i)}
	switch sc.kind {
	case kindHold:
		h, err := measureHold(ctx, w, lt.natsURL, sc, holdRounds)
		if err != nil {
			return r, err
		}
		r.hold = &h
		get := fmt.Sprintf("get returned %d bytes", h.aggBytes)
		if h.getError != "" {
			get = "get answered " + h.getError
		}
		lt.logf("  run %d: VmRSS %s, VmHWM %s, Go heap in use %s; %s; aggregate %s", i+1, mb(h.mem.rss), mb(h.mem.peak), mb(h.heap), get, h.check)
		return r, nil
	case kindDelta:
		d, err := measureDelta(ctx, lt.natsURL, sc, lt.cfg.duration)
		if err != nil {
			return r, err
		}
		r.delta = &d
		if d.skipped != "" {
			lt.logf("  run %d: skipped: %s; aggregate %s", i+1, d.skipped, d.check)
			return r, nil
		}
		lt.logf("  run %d: %.0f bytes a delta (%d) vs %.0f a full update (%d) = %.2f%%; aggregate %s", i+1,
			d.delta.perUpdate(), d.delta.msgs, d.full.perUpdate(), d.full.msgs, 100*d.ratio(), d.check)
		return r, nil
	case kindFollow:
		f, err := measureFollow(ctx, lt.natsURL, sc, lt.cfg.duration)
		if err != nil {
			return r, err
		}
		r.follow = &f
		lt.logf("  run %d: %s", i+1, f)
		return r, nil
	case kindSnapshot:
		s, err := measureSnapshot(ctx, w, lt.bins.Worker, lt.natsURL, sc)
		if err != nil {
			return r, err
		}
		r.snapshot = &s
		lt.logf("  run %d: %s", i+1, s)
		return r, nil
	case kindGet:
		o.rate, o.gets, o.getInterval = lt.cfg.getLoadRate, true, lt.cfg.getInterval
	}
	ing, err := measureIngest(ctx, w, lt.nats, lt.natsURL, sc, o)
	if err != nil {
		return r, err
	}
	r.ingest = &ing
	lt.logRun(i, r)
	return r, nil
}

// stopWorker logs the worker's first warnings and stops it.
func (lt *loadTest) stopWorker(w *workerProc) error {
	if problems := w.logProblems(3); len(problems) > 0 {
		lt.logf("  worker warnings: %s", strings.Join(problems, "\n                   "))
	}
	return w.stop(syscall.SIGTERM)
}

// quietShare is the share of the machine that other processes may use when
// a run starts, if they calm down within --quiet-wait.
const quietShare = 0.25

// waitQuiet waits up to --quiet-wait for half a second in which processes
// outside the test use less than quietShare of the machine's CPU.
func (lt *loadTest) waitQuiet(ctx context.Context) error {
	if lt.cfg.quietWait <= 0 {
		return nil
	}
	deadline := time.Now().Add(lt.cfg.quietWait)
	for {
		u0, err := readUsage(0, lt.nats.pid())
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		u1, err := readUsage(0, lt.nats.pid())
		if err != nil {
			return err
		}
		share := u1.sub(u0).othersShare()
		if share < quietShare {
			return nil
		}
		if time.Now().After(deadline) {
			lt.logf("  other processes use %.0f%% of the machine after waiting %v; measuring anyway", 100*share, lt.cfg.quietWait)
			return nil
		}
	}
}

// logRun prints one run's numbers to the progress log.
func (lt *loadTest) logRun(i int, r runResult) {
	ing := r.ingest
	var b strings.Builder
	fmt.Fprintf(&b, "  run %d:", i+1)
	if r.raw != nil {
		fmt.Fprintf(&b, " raw %s/s (%s in %s, dropped %d; %s);", count(r.raw.rate()), count(float64(r.raw.counted)), secs(r.raw.elapsed), r.raw.dropped, shares(r.raw.usage, r.raw.elapsed))
	}
	c := ing.counts
	fmt.Fprintf(&b, " worker %s/s applied (%s published, %s applied, %s dropped, %d rejected in %s)",
		count(ing.rate()), count(float64(ing.published)), count(float64(c.applied)), count(float64(c.dropped)), c.rejected, secs(ing.elapsed))
	if r.raw != nil {
		fmt.Fprintf(&b, " = %.2fx raw", ing.rate()/r.raw.rate())
	}
	ack := ing.acks.Latency
	fmt.Fprintf(&b, "; CPU %s = %.2f µs/report; %s; ack p50 %s p99 %s (n=%d, errors %d)",
		secs(ing.cpu), ing.cpuPerReport(), shares(ing.usage, ing.elapsed), dur(ack.P50), dur(ack.P99), ack.Count, ing.acks.Failed)
	if get := ing.side.get.Summary(); get.Count > 0 || ing.side.getErrors.Load() > 0 {
		fmt.Fprintf(&b, "; get p50 %s p99 %s (n=%d, errors %d, %d bytes)", dur(get.P50), dur(get.P99), get.Count,
			ing.side.getErrors.Load(), ing.side.getBytes.Load())
	}
	fmt.Fprintf(&b, "; aggregate %s", ing.check)
	fmt.Fprintf(&b, "; VmRSS %s, VmHWM %s, Go heap in use %s", mb(ing.mem.rss), mb(ing.mem.peak), mb(c.heapInuse))
	if c.publishErrors > 0 || c.reconnects > 0 || ing.unsynced > 0 {
		fmt.Fprintf(&b, "; state publish errors %d, reconnects %d, never reached the worker %d", c.publishErrors, c.reconnects, ing.unsynced)
	}
	if err := ing.side.err(); err != nil {
		fmt.Fprintf(&b, "; first side error: %v", err)
	}
	lt.logf("%s", b.String())
}

func (lt *loadTest) logf(format string, args ...any) {
	fmt.Fprintf(lt.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// shares describes the CPU used during a measurement of d: by the worker,
// nats-server and this program, in % of one CPU, and by other processes, in %
// of the machine.
func shares(u usage, d time.Duration) string {
	pct := func(t time.Duration) float64 { return 100 * t.Seconds() / d.Seconds() }
	s := ""
	if u.worker > 0 {
		s = fmt.Sprintf("worker %.0f%%, ", pct(u.worker))
	}
	return s + fmt.Sprintf("nats-server %.0f%%, loadtest %.0f%%, others %.0f%% of the machine", pct(u.nats), pct(u.self), 100*u.othersShare())
}

// workerLimitArgs returns the worker flags that make room for a scenario's
// nodes and flows and those of the ack clients (nodes of their own,
// numbered after the scenario's): none when the defaults hold them all.
// Without it, at 10000x10 and 1000x100 the ack clients were refused with
// 507 (capacity) and no ack was timed.
func workerLimitArgs(sc scenario, ackClients int) []string {
	var args []string
	nodes := sc.nodes + ackClients
	if nodes > state.DefaultMaxNodes {
		args = append(args, "--max-nodes", strconv.Itoa(nodes))
	}
	if flows := nodes * sc.flows; flows > state.DefaultMaxTotalFlows {
		args = append(args, "--max-total-flows", strconv.Itoa(flows))
	}
	return args
}
