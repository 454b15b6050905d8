package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/internal/loadgen"
)

// runBench is `worker bench`: simulated flownodes against a worker, driven
// by internal/loadgen.
func runBench(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCLICommand("bench", "[--nodes N] [--flows F] [--rate R] [--duration D] [--publish]", `
worker bench simulates --nodes flownodes with --flows flows each (node i, from
0, owns the flow ids i*F+1 to i*F+F) sending their heartbeat reports as
requests to a running worker, --rate reports per second in total, for
--duration, with at most --concurrency requests in flight and one per node.
With --publish the reports are published without acknowledgements, as fast
as the connection takes them (or at --rate), and one last request settles
them. While it runs, a progress line on stderr shows the reports sent and
acknowledged and the rate of the last second. Then it prints the rate
(acknowledged reports per second; with --publish, published) and the
acknowledgement latency (p50, p99, max), gets the aggregate, and checks that
it is exactly each node's last acknowledged report; if not, it says what
differs and exits 1. Run it against a worker with no other flownodes, as
flows it did not send count as differences; with --publish, reports the
worker dropped as a slow consumer do too. It refuses a state that already
holds nodes, which would carry the simulated flows to the frontends and
lose the reports of the nodes it overwrites, unless --force. SIGINT stops
the load early; the check still runs.`, `
worker bench --nodes 100 --flows 10 --rate 5000 --duration 30s
worker --nats-url nats://10.0.0.5:4222 --prefix bench &   # a worker of its own
worker bench --nats-url nats://10.0.0.5:4222 --prefix bench --nodes 1000 --flows 10 --rate 0`)
	cfg := loadgen.Config{}
	var publish bool
	c.fs.IntVar(&cfg.Nodes, "nodes", 100, "`N` simulated flownodes")
	c.fs.IntVar(&cfg.Flows, "flows", 10, "`F` flows per node")
	c.fs.Float64Var(&cfg.Rate, "rate", 0, "`R` reports per second, all nodes together (0: as fast as possible)")
	c.flags.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to send reports, a Go `duration`")
	c.fs.IntVar(&cfg.InFlight, "concurrency", loadgen.DefaultInFlight, "at most `C` reports in flight (and one per node)")
	c.fs.BoolVar(&publish, "publish", false, "publish the reports without acknowledgements")
	var force bool
	c.fs.BoolVar(&force, "force", false, "write into a state that already holds nodes: their reports are overwritten, and frontends see the simulated flows")
	if code, ok := c.parse(args, getenv, stdout, stderr); !ok {
		return code
	}
	cfg.Prefix, cfg.Timeout = c.prefix, c.timeout
	if publish {
		cfg.Mode = loadgen.Publish
	}
	if err := checkBench(cfg); err != nil {
		return c.fail(stderr, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, cl, code := c.connect(stderr)
	if nc == nil {
		return code
	}
	defer nc.Close()

	cfg.Progress = func(p loadgen.Progress) {
		fmt.Fprintf(stderr, "\r%-70s", fmt.Sprintf("%5.0fs  sent %d  acked %d  failed %d  rate %.0f/s",
			p.Elapsed.Seconds(), p.Sent, p.Acked, p.Failed, p.Rate))
	}
	g, err := loadgen.New(nc, cfg)
	if err != nil {
		return c.errorf(stderr, "%v", err)
	}
	if _, err := cl.Get(ctx); err != nil {
		return c.errorf(stderr, "before the load: %v", err)
	}
	if !force {
		if err := checkEmptyState(ctx, nc, c.prefix, cfg, c.timeout); err != nil {
			return c.errorf(stderr, "%v", err)
		}
	}
	res := g.Run(ctx)
	fmt.Fprintln(stderr)
	bg := context.WithoutCancel(ctx)
	if publish {
		if err := g.Sync(bg); err != nil { // bounded by --timeout and the attempts of Sync
			return c.errorf(stderr, "after the load: %v", err)
		}
	}
	chk, err := g.Check(bg)
	if err != nil {
		return c.errorf(stderr, "after the load: %v", err)
	}
	printBench(stdout, cfg, res, chk)
	switch {
	case res.Acked == 0 && !publish:
		return c.errorf(stderr, "no report was acknowledged")
	case !chk.Exact():
		return 1
	}
	return 0
}

// printBench writes the result of a load.
func printBench(w io.Writer, cfg loadgen.Config, res loadgen.Result, chk loadgen.Check) {
	us := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
	fmt.Fprintf(w, "nodes %d, flows per node %d, target rate %s, %v, %s\n", cfg.Nodes, cfg.Flows, rateText(cfg.Rate), cfg.Duration, cfg.Mode)
	fmt.Fprintf(w, "sent %d, acked %d, failed %d in %v\n", res.Sent, res.Acked, res.Failed, res.Elapsed.Round(time.Millisecond))
	if res.FirstError != nil {
		fmt.Fprintf(w, "first failure: %s\n", outside(oneLine(res.FirstError)))
	}
	if cfg.Mode == loadgen.Publish {
		fmt.Fprintf(w, "published rate: %.1f reports/s\n", res.Rate())
	} else {
		fmt.Fprintf(w, "applied rate: %.1f reports/s\n", res.Rate())
		fmt.Fprintf(w, "ack latency: p50 %v, p99 %v, max %v\n", us(res.Latency.P50), us(res.Latency.P99), us(res.Latency.Max))
	}
	st := chk.State
	flows := len(st.Value.Flows())
	if chk.Exact() {
		fmt.Fprintf(w, "aggregate: exact (%d flows, %s, epoch %s, revision %d)\n",
			flows, humanSize(totalSize(st.Value)), outside(st.Epoch), st.Revision)
		return
	}
	fmt.Fprintf(w, "aggregate: DIFFERS from each node's last acknowledged report (%d flows, epoch %s, revision %d):\n",
		flows, outside(st.Epoch), st.Revision)
	foreign := false
	for _, line := range chk.Diff {
		fmt.Fprintf(w, "  %s\n", line)
		foreign = foreign || strings.Contains(line, "no simulated node owns")
	}
	if foreign {
		fmt.Fprintln(w, "flows that no simulated node owns come from other flownodes or an earlier run: bench a worker of its own")
	}
	if cfg.Mode == loadgen.Publish {
		fmt.Fprintln(w, "published reports that the worker dropped as a slow consumer differ too: see flowstate_slow_consumer_dropped_total, or lower --rate")
	}
}

func rateText(r float64) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%g/s", r)
}

// checkBench validates the flags of bench in their own terms.
func checkBench(cfg loadgen.Config) error {
	switch {
	case cfg.Nodes <= 0:
		return fmt.Errorf("--nodes %d must be positive", cfg.Nodes)
	case cfg.Flows < 0:
		return fmt.Errorf("--flows %d must not be negative", cfg.Flows)
	case cfg.Rate < 0:
		return fmt.Errorf("--rate %g must not be negative", cfg.Rate)
	case cfg.Duration <= 0:
		return fmt.Errorf("--duration %v must be positive", cfg.Duration)
	case cfg.InFlight <= 0:
		return fmt.Errorf("--concurrency %d must be positive", cfg.InFlight)
	}
	if err := cfg.Validate(); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), loadgen.ErrConfig.Error()+": "))
	}
	return nil
}
