// Command loadtest measures the flow state worker end to end: a real
// nats-server and the worker binary as separate processes on 127.0.0.1, driven
// over loopback with pre-encoded heartbeat reports. It prints a summary table
// and checks the performance targets.
//
// Run it from the module root:
//
//	go run ./e2e/loadtest                                  # every scenario, 3 runs of 3 s
//	go run ./e2e/loadtest --runs 1 --duration 1s           # a quick look
//	go run ./e2e/loadtest --scenarios 1000x10,get --bin-dir bin
//
// It builds cmd/worker and nats-server into a temporary directory (or takes
// them from --bin-dir), starts nats-server on a free port of 127.0.0.1, and
// for each scenario and run:
//
//   - NxF (nodes x flows per node): first the ceiling of NATS itself, a
//     publisher sending the reports round-robin as fast as it can to a
//     counting queue subscriber (no worker running); then a fresh worker, the
//     same publisher, and a final request whose ack means that every report
//     before it was handled. Applied reports come from the worker's /metrics,
//     so slow-consumer drops are not counted as applied. Meanwhile
//     --ack-clients simulated nodes of their own (after the publisher's)
//     send reports as requests, one each in flight, and time the acks.
//   - get: 1000 nodes x 10 flows, a 10,000-flow aggregate; the ingest is
//     paced at --get-load-rate while a client times gets.
//   - rss: the worker's resident memory holding 10,000 nodes x 10 flows.
//   - delta: bytes of an update on flow.state.delta against one on
//     flow.state, 1,000 nodes x 10 flows, 10 nodes reporting per 100 ms;
//     skipped, with a message, when the worker publishes no delta (delta.go).
//   - follow-1k, follow-10k: the CPU and bytes per second of a client.Watch
//     following deltas against one following flow.state, both child
//     processes of this program, 1,000 and 10,000 flows, 10 nodes reporting
//     per 100 ms (follow.go).
//   - acked, js-r1, js-r3: 1,000 nodes x 10 flows, 256 acked reports in
//     flight, against one worker on the memory backend, one worker on a
//     JetStream bucket (R1, memory storage) of a server of its own, and
//     three workers on an R3 file-storage bucket of three servers; the
//     JetStream rates are compared with the memory backend's (jetstream.go).
//
// Named only (not in all):
//
//   - snapshot: 1,000,000 flows (100 nodes x 10,000) read by client.Get and
//     by `worker get` in chunks within the default 1 MB max payload, timed,
//     with the worker's CPU per chunk, then `worker get --json` of the same
//     state: its time, peak RSS and exact bytes (snapshot.go). `make bench`
//     names it.
//   - fanout, fanout-5s: 300 slow subscribers of flow.state (256 KB/s each)
//     of a 10,000-flow aggregate with 10 nodes reporting per 100 ms, on a
//     nats-server of their own (max_pending 8 MB): the server's RSS, the
//     subscribers it closed and the ack latency, with the worker's defaults
//     and with --full-interval 5s (fanout.go).
//
// Every run ends with a check of the worker's aggregate against each
// node's last acknowledged report (internal/loadgen): it must be exact
// unless reports were lost (dropped as a slow consumer, rejected).
//
// Every scenario starts a fresh worker. Progress goes to stderr; the table
// and the target verdicts go to stdout. Ctrl-C stops the children and
// prints what was measured.
//
// Setting LOADTEST_PERF_DIR records the worker with perf(1) during each
// measurement, into that directory, for `perf report -i FILE`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if isFollowChild(os.Args[1:]) {
		os.Exit(runFollowChild(os.Args[2:], os.Stdin, os.Stdout))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	lt := &loadTest{cfg: cfg, log: stderr}
	var benches []goBench
	if cfg.goBench != "" {
		if benches, err = readGoBench(cfg.goBench); err != nil {
			fmt.Fprintf(stderr, "loadtest: --go-bench: %v\n", err)
			return 2
		}
	}
	results, runErr := lt.run(ctx)
	printGoBench(stdout, benches)
	printSummary(stdout, cfg, lt.natsVersion, results, time.Since(start))
	if runErr != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", runErr)
		return 1
	}
	return 0
}

// config is the command line.
type config struct {
	duration    time.Duration // of each measurement
	runs        int           // of each scenario
	scenarios   []scenario
	getLoadRate float64       // reports/s of the get scenario's ingest
	getInterval time.Duration // pause between two gets
	ackClients  int           // clients timing acks during the ingest
	quietWait   time.Duration // longest wait before a run for the machine to calm down
	binDir      string        // prebuilt worker and nats-server; empty: build them
	perfDir     string        // LOADTEST_PERF_DIR: record the worker with perf
	goBench     string        // go test -bench output to print with the summary
}

func parseFlags(args []string, out io.Writer) (config, error) {
	c := config{}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "how long each measurement publishes")
	fs.IntVar(&c.runs, "runs", 3, "runs of each scenario (median and range are reported)")
	names := fs.String("scenarios", "all", "comma-separated: NxF (nodes x flows per node), get, rss, all ("+defaultScenarioNames+"), and, only when named, "+pendingScenarioNames)
	fs.Float64Var(&c.getLoadRate, "get-load-rate", 50000, "reports/s ingested during the get scenario")
	fs.DurationVar(&c.getInterval, "get-interval", 0, "pause between two gets of the get scenario (0: back to back)")
	fs.IntVar(&c.ackClients, "ack-clients", 8, "nodes of their own sending reports as requests during the ingest (one each in flight), timing the acks")
	fs.DurationVar(&c.quietWait, "quiet-wait", 5*time.Second, "before each run, wait up to this long for other processes to use less than 25% of the machine (0: don't)")
	fs.StringVar(&c.binDir, "bin-dir", "", "directory holding prebuilt worker and nats-server binaries (empty: build them)")
	fs.StringVar(&c.goBench, "go-bench", "", "a file of `go test -bench` output, printed as the first part of the summary")
	fs.Usage = func() {
		fmt.Fprintln(out, "Usage: go run ./e2e/loadtest [flags]\n\nMeasures the worker end to end against nats-server on 127.0.0.1.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.scenarios, err = parseScenarios(*names); err != nil {
		return c, err
	}
	switch {
	case c.duration <= 0:
		return c, fmt.Errorf("--duration %v must be positive", c.duration)
	case c.runs <= 0:
		return c, fmt.Errorf("--runs %d must be positive", c.runs)
	case c.getLoadRate <= 0:
		return c, fmt.Errorf("--get-load-rate %v must be positive", c.getLoadRate)
	case c.getInterval < 0:
		return c, fmt.Errorf("--get-interval %v is negative", c.getInterval)
	case c.quietWait < 0:
		return c, fmt.Errorf("--quiet-wait %v is negative", c.quietWait)
	case c.ackClients < 0:
		return c, fmt.Errorf("--ack-clients %d is negative", c.ackClients)
	}
	c.perfDir = os.Getenv("LOADTEST_PERF_DIR")
	return c, nil
}
