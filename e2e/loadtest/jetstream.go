package main

// The acked scenarios compare the state backends under the same load:
// 1,000 nodes x 10 flows, 256 acknowledged reports in flight, for the
// backend targets (ackedTargets). They are in --scenarios all, and run
// alone with --scenarios acked,js-r1,js-r3.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/internal/proctest"
)

// backend is where an acked scenario's state lives.
type backend struct {
	servers    int      // nats-servers of their own, with JetStream: 0 (the shared one), 1, or a cluster of 3
	workers    int      // workers in the queue group
	workerArgs []string // the backend's worker flags
	// The bucket's replicas and storage, as workerArgs give them: with
	// servers, JetStream's own ceiling (jsCeiling) is measured on a bucket
	// like it before the workers start.
	replicas int
	storage  jetstream.StorageType
	// config is the servers' configuration file, if any (a cluster's).
	config string
	// relay: the same load is also sent to a relay of JetStream's own
	// (jsrelay.go) on the same servers before the workers start.
	relay bool
}

// ackedInFlight is the window of the acked scenarios.
const ackedInFlight = 256

// The acked scenarios; acked is the memory backend they are compared with.
var ackedScenarios = []scenario{
	{name: "acked", kind: kindAcked, nodes: 1000, flows: 10, backend: &backend{workers: 1}},
	{name: "js-r1", kind: kindAcked, nodes: 1000, flows: 10, backend: &backend{servers: 1, workers: 1,
		workerArgs: []string{"--kv", "jetstream", "--kv-storage", "memory", "--kv-replicas", "1"},
		replicas:   1, storage: jetstream.MemoryStorage, relay: true}},
	{name: "js-r3", kind: kindAcked, nodes: 1000, flows: 10, backend: &backend{servers: 3, workers: 3,
		workerArgs: []string{"--kv", "jetstream", "--kv-storage", "file", "--kv-replicas", "3"},
		replicas:   3, storage: jetstream.FileStorage}},
	{name: "js-r3-sync", kind: kindAcked, nodes: 1000, flows: 10, backend: &backend{servers: 3, workers: 3,
		workerArgs: []string{"--kv", "jetstream", "--kv-storage", "file", "--kv-replicas", "3"},
		replicas:   3, storage: jetstream.FileStorage, config: "jetstream { sync_interval: always }"}},
}

// ackedResult is one run of an acked scenario.
type ackedResult struct {
	res   loadgen.Result
	check aggCheck
	cpu   time.Duration // the workers' user+system CPU time while the reports were sent
	// conflicts are the reports the workers answered 503 because the
	// bucket refused their node-key write's condition (their /metrics).
	conflicts uint64
	// ceiling is JetStream's own rate for the same job on the same
	// servers, measured just before; nil without servers of its own.
	ceiling *jsCeiling
	// relay is the same load sent to the relay (jsrelay.go) on the same
	// servers, just before: pipelined, then serial; nil unless the backend
	// has one.
	relay [2]*loadgen.Result
}

// cpuPerAck returns the workers' CPU µs per acknowledged report.
func (r ackedResult) cpuPerAck() float64 {
	return float64(r.cpu.Microseconds()) / float64(r.res.Acked)
}

// runAcked starts the scenario's servers and workers, sends acked reports
// for --duration, and checks the final aggregate: it must be exact.
func (lt *loadTest) runAcked(ctx context.Context, sc scenario) (r ackedResult, err error) {
	b := sc.backend
	urls := []string{lt.natsURL}
	if b.servers > 0 {
		var stop func() error
		urls, stop, err = lt.startJetStream(b.servers, b.config)
		if err != nil {
			return r, err
		}
		defer func() { err = errors.Join(err, stop()) }()
		c, err := measureJSCeiling(ctx, urls[0], sc, b.replicas, b.storage, b.workers, lt.cfg.duration)
		if err != nil {
			return r, err
		}
		r.ceiling = &c
		if err := lt.waitQuiet(ctx); err != nil {
			return r, err
		}
	}
	if b.relay {
		for i, serial := range []bool{false, true} {
			res, err := measureRelay(ctx, urls[0], sc, b.replicas, b.storage, lt.cfg.duration, serial)
			if err != nil {
				return r, err
			}
			r.relay[i] = &res
			if err := lt.waitQuiet(ctx); err != nil {
				return r, err
			}
		}
	}
	var pids []int
	var workers []*workerProc
	for range b.workers {
		w, err := startWorker(ctx, lt.bins.Worker, strings.Join(urls, ","), b.workerArgs...)
		if err != nil {
			return r, err
		}
		defer func() { err = errors.Join(err, lt.stopWorker(w)) }()
		pids = append(pids, w.pid())
		workers = append(workers, w)
	}
	nc, err := connect(urls[0], "loadtest-acked")
	if err != nil {
		return r, err
	}
	defer nc.Close()
	g, err := loadgen.New(nc, loadgen.Config{Nodes: sc.nodes, Flows: sc.flows, Duration: lt.cfg.duration,
		InFlight: ackedInFlight, Timeout: requestTimeout})
	if err != nil {
		return r, err
	}
	cpu0, err := workersCPU(pids)
	if err != nil {
		return r, err
	}
	r.res = g.Run(ctx)
	cpu1, err := workersCPU(pids)
	if err != nil {
		return r, err
	}
	r.cpu = cpu1 - cpu0
	if err := ctx.Err(); err != nil {
		return r, err
	}
	for _, w := range workers {
		c, err := scrape(ctx, w.metricsAddr)
		if err != nil {
			return r, err
		}
		r.conflicts += c.conflicts
	}
	r.check, err = checkAggregate(ctx, g, 0)
	return r, err
}

// workersCPU returns the user plus system CPU time of the workers pids.
func workersCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		t, err := cpuTime(pid)
		if err != nil {
			return 0, err
		}
		sum += t
	}
	return sum, nil
}

// startJetStream starts n nats-servers with JetStream (a cluster with the
// configuration file config, if any), each with a store
// of its own, as one cluster when n > 1, and waits until JetStream answers.
// stop stops them and removes the stores.
func (lt *loadTest) startJetStream(n int, config string) (urls []string, stop func() error, err error) {
	dir, err := os.MkdirTemp("", "flowstate-loadtest-js-")
	if err != nil {
		return nil, nil, err
	}
	storeDir := func(i int) string { return fmt.Sprintf("%s/s%d", dir, i) }
	var close func() error
	if n == 1 {
		var p *process
		var url string
		p, url, err = startNATS(lt.bins.NATSServer, "-js", "-sd", storeDir(0), "-n", "s0")
		if err == nil {
			urls, close = []string{url}, func() error { return p.stop(syscall.SIGTERM) }
		}
	} else {
		var c *proctest.Cluster
		c, err = proctest.StartCluster(proctest.ClusterSpec{Path: lt.bins.NATSServer, N: n, Name: "flowstate",
			StoreDir: storeDir, Keep: outputKeep, OwnGroup: true, Config: config})
		if err == nil {
			urls, close = c.URLs(), c.Close
		}
	}
	if err != nil {
		return nil, nil, errors.Join(err, os.RemoveAll(dir))
	}
	stop = func() error { return errors.Join(close(), os.RemoveAll(dir)) }
	if err := proctest.AwaitJetStream(strings.Join(urls, ","), jetStreamTimeout); err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	return urls, stop, nil
}

// jetStreamTimeout bounds the wait for a cluster's JetStream meta leader.
const jetStreamTimeout = 30 * time.Second

// ackedTargets are the backend targets (the acked rate of the JetStream
// backend against the memory backend, and its ack p99), when an acked
// scenario ran.
func ackedTargets(find func(string) []runResult) []target {
	mem := find("acked")
	if len(mem) == 0 && len(find("js-r1")) == 0 && len(find("js-r3")) == 0 {
		return nil
	}
	var out []target
	for _, tc := range []struct {
		name, scenario string
		min            float64
		p99            time.Duration // 0: no latency target
	}{
		{"JetStream R1 memory, 1 worker: acked rate >= 0.5x memory, ack p99 < 50 ms", "js-r1", 0.5, 50 * time.Millisecond},
		{"JetStream R3 file, 3 servers, 3 workers: acked rate >= 0.2x memory", "js-r3", 0.2, 0},
	} {
		t := target{name: tc.name}
		runs := find(tc.scenario)
		if len(runs) > 0 && len(mem) > 0 {
			js, m := over(runs, appliedRate), over(mem, appliedRate)
			ratio := pairedRatio(runs, mem, appliedRate)
			p99 := over(runs, ackP99)
			met := ratio.med >= tc.min && (tc.p99 == 0 || p99.med < tc.p99.Seconds())
			t.verdict = verdict(met, ratio, tc.min)
			failed, conflicts := over(runs, failedReports), over(runs, conflictReports)
			t.detail = fmt.Sprintf("%.2fx (%.2f..%.2f): %s/s vs %s/s; ack p99 %s (%s..%s); exact in %d of %d runs; reports failed %.0f (%.0f..%.0f), refused by their write's condition %.0f (%.0f..%.0f)",
				ratio.med, ratio.min, ratio.max, count(js.med), count(m.med), durF(p99.med), durF(p99.min), durF(p99.max),
				exactRuns(runs), len(runs), failed.med, failed.min, failed.max, conflicts.med, conflicts.min, conflicts.max)
		}
		out = append(out, t)
	}
	return append(out, ceilingTargets(find)...)
}

// ceilingTargets compare the JetStream backend's acked rate with
// JetStream's own for the same job (jsCeiling), run by run: the cost of the
// worker over the engine.
func ceilingTargets(find func(string) []runResult) []target {
	var out []target
	for _, tc := range []struct {
		name, scenario string
		min            float64
	}{
		{"JetStream R1 memory: acked rate >= 0.9x JetStream's own conditional put+watch", "js-r1", 0.9},
		{"JetStream R3 file: acked rate >= 0.8x JetStream's own conditional put+watch", "js-r3", 0.8},
	} {
		var runs []runResult // those with a ceiling
		for _, r := range find(tc.scenario) {
			if r.acked != nil && r.acked.ceiling != nil {
				runs = append(runs, r)
			}
		}
		if len(runs) == 0 {
			continue
		}
		t := target{name: tc.name}
		ratio, ceil, js, cpu := over(runs, ofCeiling), over(runs, ceilingRate), over(runs, appliedRate), over(runs, cpuPerAck)
		t.verdict = verdict(ratio.med >= tc.min, ratio, tc.min)
		t.detail = fmt.Sprintf("%.2fx (%.2f..%.2f): %s/s vs %s/s (%s..%s); workers' CPU %.1f µs/ack (%.1f..%.1f)",
			ratio.med, ratio.min, ratio.max, count(js.med), count(ceil.med), count(ceil.min), count(ceil.max), cpu.med, cpu.min, cpu.max)
		out = append(out, t)
	}
	return append(out, relayTargets(find)...)
}

// relayTargets compare the JetStream R1 backend's acked rate with the
// relay's for the same load, run by run, pipelined and serial: what the
// worker costs, or saves, over the simplest clients of the engine that ack
// as it does.
func relayTargets(find func(string) []runResult) []target {
	var runs []runResult // those with a relay
	for _, r := range find("js-r1") {
		if r.acked != nil && r.acked.relay[0] != nil {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return nil
	}
	var out []target
	for i, kind := range []string{"pipelined", "serial"} {
		rate := ackedMetric(func(r ackedResult) float64 { return r.relay[i].Rate() })
		ratio := ackedMetric(func(r ackedResult) float64 { return r.res.Rate() / r.relay[i].Rate() })
		failed := ackedMetric(func(r ackedResult) float64 { return float64(r.relay[i].Failed) })
		t := target{name: fmt.Sprintf("JetStream R1 memory: acked rate >= %.1fx a %s relay of JetStream's own (queue subscriber, conditional put, reply once acked and watched)", relayLeast, kind)}
		x, rel, js, f := over(runs, ratio), over(runs, rate), over(runs, appliedRate), over(runs, failed)
		t.verdict = verdict(x.med >= relayLeast, x, relayLeast)
		t.detail = fmt.Sprintf("%.2fx (%.2f..%.2f): %s/s vs %s/s (%s..%s); the relay's reports failed %.0f (%.0f..%.0f)",
			x.med, x.min, x.max, count(js.med), count(rel.med), count(rel.min), count(rel.max), f.med, f.min, f.max)
		out = append(out, t)
	}
	return out
}

// relayLeast is the relay target: the worker, which decodes, checks and
// aggregates, at least this much faster than a relay that does none of it.
const relayLeast = 1.2

// ceilingRate, ofCeiling and cpuPerAck are an acked run's JetStream
// ceiling, its acked rate over that ceiling, and its workers' CPU per ack.
var (
	ceilingRate = ackedMetric(func(r ackedResult) float64 {
		if r.ceiling == nil {
			return nan
		}
		return r.ceiling.rate()
	})
	ofCeiling = ackedMetric(func(r ackedResult) float64 {
		if r.ceiling == nil {
			return nan
		}
		return r.res.Rate() / r.ceiling.rate()
	})
	cpuPerAck = ackedMetric(ackedResult.cpuPerAck)
)

// failedReports and conflictReports are an acked run's reports that were
// not acked, and those of them refused by their write's condition.
var (
	failedReports   = ackedMetric(func(r ackedResult) float64 { return float64(r.res.Failed) })
	conflictReports = ackedMetric(func(r ackedResult) float64 { return float64(r.conflicts) })
)

func ackedMetric(f func(ackedResult) float64) func(runResult) float64 {
	return func(r runResult) float64 {
		if r.acked == nil {
			return nan
		}
		return f(*r.acked)
	}
}

// exactRuns counts the runs whose final aggregate was checked exact.
func exactRuns(runs []runResult) int {
	n := 0
	for _, r := range runs {
		if c := r.check(); c != nil && c.exact {
			n++
		}
	}
	return n
}
