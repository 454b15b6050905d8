package main

// The snapshot scenario measures issue 12's large state: 1,000,000 flows
// (100 nodes x 10,000 flows) read with nats-server's default 1 MB max
// payload, by client.Get (chunked gets) and by `worker get`, timing each
// and the worker's CPU per chunk sent. The first get of a state splits and
// encodes it; a get of the same state again sends the chunks it kept. Not
// in --scenarios all; run it with --scenarios snapshot.

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"flowstate/client"
	"flowstate/internal/loadgen"
)

var snapshotScenario = scenario{name: "snapshot", kind: kindSnapshot, nodes: 100, flows: 10000,
	workerArgs: []string{"--max-total-flows", "1000000", "--max-flows", "10000"}}

// getCost is one get of the snapshot scenario.
type getCost struct {
	elapsed   time.Duration
	workerCPU time.Duration // the worker's utime+stime meanwhile
	chunks    uint64        // flowstate_chunks_sent_total meanwhile
}

func (g getCost) cpuPerChunk() time.Duration {
	if g.chunks == 0 {
		return 0
	}
	return g.workerCPU / time.Duration(g.chunks)
}

func (g getCost) String() string {
	return fmt.Sprintf("%s, %d chunks, worker CPU %s = %s/chunk", secs(g.elapsed), g.chunks, secs(g.workerCPU), dur(g.cpuPerChunk()))
}

// snapshotResult is one run of the snapshot scenario.
type snapshotResult struct {
	flows       int     // in the state read
	first, next getCost // client.Get of a new state, then of the same state
	cli         getCost // `worker get`, printing the table to /dev/null
	cliCPU      time.Duration
	check       aggCheck
}

// measureSnapshot loads the worker with every node's report and reads the
// state three times.
func measureSnapshot(ctx context.Context, w *workerProc, workerBin, url string, sc scenario) (r snapshotResult, err error) {
	nc, err := connect(url, "loadtest-snapshot")
	if err != nil {
		return r, err
	}
	defer nc.Close()
	g, err := loadgen.New(nc, loadgen.Config{Nodes: sc.nodes, Flows: sc.flows, Duration: time.Millisecond, Timeout: requestTimeout})
	if err != nil {
		return r, err
	}
	if err := g.WarmUp(ctx); err != nil {
		return r, err
	}
	cl, err := client.New(nc, client.Options{Prefix: prefix, Timeout: 2 * requestTimeout})
	if err != nil {
		return r, err
	}
	measure := func(get func() error) (getCost, error) {
		c0, err := scrapeChunks(ctx, w.metricsAddr)
		if err != nil {
			return getCost{}, err
		}
		cpu0, err := cpuTime(w.pid())
		if err != nil {
			return getCost{}, err
		}
		start := time.Now()
		if err := get(); err != nil {
			return getCost{}, err
		}
		elapsed := time.Since(start)
		cpu1, err := cpuTime(w.pid())
		if err != nil {
			return getCost{}, err
		}
		c1, err := scrapeChunks(ctx, w.metricsAddr)
		return getCost{elapsed: elapsed, workerCPU: cpu1 - cpu0, chunks: c1 - c0}, err
	}
	clientGet := func() error {
		s, err := cl.Get(ctx)
		r.flows = len(s.Value.StateSize)
		return err
	}
	if r.first, err = measure(clientGet); err != nil {
		return r, fmt.Errorf("client.Get: %w", err)
	}
	if r.next, err = measure(clientGet); err != nil {
		return r, fmt.Errorf("client.Get again: %w", err)
	}
	r.cli, err = measure(func() error {
		cmd := exec.CommandContext(ctx, workerBin, "get", "--nats-url", url, "--timeout", strconv.Itoa(int(2*requestTimeout/time.Second))+"s")
		out, err := cmd.CombinedOutput() // the table: tens of MB
		if err != nil {
			return fmt.Errorf("worker get: %w: %.500s", err, out)
		}
		r.cliCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		return nil
	})
	if err != nil {
		return r, err
	}
	r.check, err = checkAggregate(ctx, g, 0)
	return r, err
}

// scrapeChunks reads flowstate_chunks_sent_total from the worker.
func scrapeChunks(ctx context.Context, addr string) (uint64, error) {
	c, err := scrape(ctx, addr)
	return c.chunksSent, err
}

// String is a run's line in the progress log.
func (r snapshotResult) String() string {
	return fmt.Sprintf("%d flows; client.Get %s; again %s; worker get %s (its own CPU %s); aggregate %s",
		r.flows, r.first, r.next, r.cli, secs(r.cliCPU), r.check)
}

// snapshotTargets is issue 12's large-state target, when the snapshot
// scenario ran: client.Get reads the 1,000,000 flows in chunks.
func snapshotTargets(find func(string) []runResult) []target {
	runs := find(snapshotScenario.name)
	if len(runs) == 0 {
		return nil
	}
	t := target{name: "a snapshot of 1,000,000 flows read by client.Get and worker get within a 1 MB max payload", verdict: "met"}
	var first, next, cli []float64
	for _, r := range runs {
		s := r.snapshot
		if s == nil || s.flows != snapshotScenario.nodes*snapshotScenario.flows {
			t.verdict = "missed"
			continue
		}
		first = append(first, s.first.elapsed.Seconds())
		next = append(next, s.next.elapsed.Seconds())
		cli = append(cli, s.cli.elapsed.Seconds())
	}
	if len(first) == 0 {
		t.detail = "no run read every flow"
		return []target{t}
	}
	last := runs[len(runs)-1].snapshot
	t.detail = fmt.Sprintf("client.Get %s (again %s), worker get %s; worker CPU %s/chunk (%s/chunk for a state already split), %d chunks",
		durF(spreadOf(first).med), durF(spreadOf(next).med), durF(spreadOf(cli).med),
		dur(last.first.cpuPerChunk()), dur(last.next.cpuPerChunk()), last.first.chunks)
	return []target{t}
}
