package main

// The snapshot scenario measures a large state: 1,000,000 flows (100
// nodes x 10,000 flows) read with nats-server's default 1 MB max payload,
// by client.Get (chunked gets), by `worker get` and by `worker get --json`
// (GreptimeDB's JSON, rendered from chunks), timing each, the worker's CPU
// per chunk sent, and the peak RSS of `worker get --json`. The first get of a state splits and
// encodes it; a get of the same state again sends the chunks it kept. Not
// in --scenarios all; run it with --scenarios snapshot.

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/loadgen"
)

var snapshotScenario = scenario{name: "snapshot", kind: kindSnapshot, nodes: 100, flows: 10000,
	workerArgs: []string{"--max-total-flows", "1000000", "--max-flows", "10000"}}

// getCost is one get of the snapshot scenario.
type getCost struct {
	elapsed   time.Duration
	workerCPU time.Duration // the worker's utime+stime meanwhile
	readerCPU time.Duration // the reader's: this program's, or worker get's
	chunks    uint64        // flowstate_chunks_sent_total meanwhile
}

func (g getCost) cpuPerChunk() time.Duration {
	if g.chunks == 0 {
		return 0
	}
	return g.workerCPU / time.Duration(g.chunks)
}

func (g getCost) String() string {
	return fmt.Sprintf("%s, %d chunks, worker CPU %s = %s/chunk, reader CPU %s", secs(g.elapsed), g.chunks, secs(g.workerCPU), dur(g.cpuPerChunk()), secs(g.readerCPU))
}

// snapshotResult is one run of the snapshot scenario.
type snapshotResult struct {
	flows       int     // in the state read
	first, next getCost // client.Get of a new state, then of the same state
	cli         getCost // `worker get`, its table discarded
	json        getCost // `worker get --json`
	jsonRSS     uint64  // its peak RSS, bytes
	jsonExact   bool    // it printed GreptimeDB's bytes of client.Get's state, and a newline
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
	cl, err := client.New(nc, client.Options{Prefix: prefix, Timeout: 2 * requestTimeout, MaxFlows: math.MaxInt, MaxGetBytes: math.MaxInt}) // its own worker, of any size
	if err != nil {
		return r, err
	}
	// get returns the reader's CPU time if it is not this program.
	measure := func(get func() (time.Duration, error)) (getCost, error) {
		c0, err := scrapeChunks(ctx, w.metricsAddr)
		if err != nil {
			return getCost{}, err
		}
		cpu0, err := cpuTime(w.pid())
		if err != nil {
			return getCost{}, err
		}
		self0 := selfCPU()
		start := time.Now()
		reader, err := get()
		if err != nil {
			return getCost{}, err
		}
		elapsed := time.Since(start)
		if reader == 0 {
			reader = selfCPU() - self0
		}
		cpu1, err := cpuTime(w.pid())
		if err != nil {
			return getCost{}, err
		}
		c1, err := scrapeChunks(ctx, w.metricsAddr)
		return getCost{elapsed: elapsed, workerCPU: cpu1 - cpu0, readerCPU: reader, chunks: c1 - c0}, err
	}
	var state client.State
	clientGet := func() (time.Duration, error) {
		s, err := cl.Get(ctx)
		r.flows, state = len(s.Value.StateSize), s
		return 0, err
	}
	if r.first, err = measure(clientGet); err != nil {
		return r, fmt.Errorf("client.Get: %w", err)
	}
	if r.next, err = measure(clientGet); err != nil {
		return r, fmt.Errorf("client.Get again: %w", err)
	}
	r.cli, err = measure(func() (time.Duration, error) {
		cmd := exec.CommandContext(ctx, workerBin, "get", "--nats-url", url, "--timeout", strconv.Itoa(int(2*requestTimeout/time.Second))+"s")
		var stderr strings.Builder
		cmd.Stderr = &stderr // stdout, the table of tens of MB, goes to /dev/null
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("worker get: %w: %.500s", err, stderr.String())
		}
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
	})
	if err != nil {
		return r, err
	}
	r.json, err = measure(func() (time.Duration, error) {
		cmd := exec.CommandContext(ctx, workerBin, "get", "--json", "--nats-url", url, "--timeout", strconv.Itoa(int(2*requestTimeout/time.Second))+"s")
		var stdout bytes.Buffer
		var stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("worker get --json: %w: %.500s", err, stderr.String())
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.jsonRSS = uint64(ru.Maxrss) << 10 // KiB on Linux
		}
		r.jsonExact = bytes.Equal(stdout.Bytes(), append(flowstate.AppendJSON(nil, state.Value.Flows()), '\n'))
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
	})
	if err != nil {
		return r, err
	}
	r.check, err = checkAggregate(ctx, g, 0)
	return r, err
}

// selfCPU returns this program's utime+stime.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scrapeChunks reads flowstate_chunks_sent_total from the worker.
func scrapeChunks(ctx context.Context, addr string) (uint64, error) {
	c, err := scrape(ctx, addr)
	return c.chunksSent, err
}

// String is a run's line in the progress log.
func (r snapshotResult) String() string {
	return fmt.Sprintf("%d flows; client.Get %s; again %s; worker get %s; worker get --json %s, peak RSS %s, exact %t; aggregate %s",
		r.flows, r.first, r.next, r.cli, r.json, mb(r.jsonRSS), r.jsonExact, r.check)
}

// snapshotTargets is the large-state target, when the snapshot
// scenario ran: client.Get reads the 1,000,000 flows in chunks.
func snapshotTargets(find func(string) []runResult) []target {
	runs := find(snapshotScenario.name)
	if len(runs) == 0 {
		return nil
	}
	t := target{name: "a snapshot of 1,000,000 flows read by client.Get, worker get and worker get --json within a 1 MB max payload", verdict: "met"}
	var first, next, cli, json []float64
	for _, r := range runs {
		s := r.snapshot
		if s == nil || s.flows != snapshotScenario.nodes*snapshotScenario.flows || !s.jsonExact {
			t.verdict = "missed"
			continue
		}
		first = append(first, s.first.elapsed.Seconds())
		next = append(next, s.next.elapsed.Seconds())
		cli = append(cli, s.cli.elapsed.Seconds())
		json = append(json, s.json.elapsed.Seconds())
	}
	if len(first) == 0 {
		t.detail = "no run read every flow"
		return []target{t}
	}
	last := runs[len(runs)-1].snapshot
	t.detail = fmt.Sprintf("client.Get %s (again %s; its CPU %s), worker get %s, worker get --json %s (exact, peak RSS %s); worker CPU %s/chunk (%s/chunk for a state already split), %d chunks",
		durF(spreadOf(first).med), durF(spreadOf(next).med), secs(last.next.readerCPU), durF(spreadOf(cli).med),
		durF(spreadOf(json).med), mb(last.jsonRSS), dur(last.first.cpuPerChunk()), dur(last.next.cpuPerChunk()), last.first.chunks)
	return []target{t}
}
