package main

// The delta scenario measures the delta target: the bytes of a delta
// update on <prefix>.state.delta against the full one on <prefix>.state,
// published at the same moments of the same run, with 10,000 flows on 1,000
// nodes and 10 nodes reporting per 100 ms. A worker that predates protocol
// v2 publishes no delta: the scenario then says so and is skipped.

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/protocol"
)

// deltaRate is the reports per second of the delta scenario: 10 nodes per
// 100 ms.
const deltaRate = 100

var deltaScenario = scenario{name: "delta", kind: kindDelta, nodes: 1000, flows: 10}

// updateCount counts the updates of one subject.
type updateCount struct {
	msgs, bytes uint64
}

// perUpdate returns the mean bytes of an update.
func (c updateCount) perUpdate() float64 { return float64(c.bytes) / float64(c.msgs) }

// deltaResult is one run of the delta scenario.
type deltaResult struct {
	full, delta updateCount
	skipped     string // why no comparison was made; empty when it was
	check       aggCheck
}

// ratio returns the delta's bytes per update over the full update's.
func (r deltaResult) ratio() float64 { return r.delta.perUpdate() / r.full.perUpdate() }

// updateCounter counts the updates on both subjects whose changes all come
// after the warm-up: full updates of a revision above from, deltas whose
// base is at least from.
type updateCounter struct {
	mu          sync.Mutex // guards full, delta and from
	full, delta updateCount
	from        uint64
}

func (u *updateCounter) onFull(m *nats.Msg) {
	rev, ok := revision(m, protocol.HeaderRevision)
	u.mu.Lock()
	defer u.mu.Unlock()
	if ok && rev > u.from {
		u.full.msgs++
		u.full.bytes += uint64(len(m.Data))
	}
}

func (u *updateCounter) onDelta(m *nats.Msg) {
	base, ok := revision(m, protocol.HeaderBaseRevision)
	u.mu.Lock()
	defer u.mu.Unlock()
	if ok && base >= u.from && m.Header.Get(protocol.HeaderResync) == "" {
		u.delta.msgs++
		u.delta.bytes += uint64(len(m.Data))
	}
}

func revision(m *nats.Msg, header string) (uint64, bool) {
	n, err := strconv.ParseUint(m.Header.Get(header), 10, 64)
	return n, err == nil
}

// measureDelta warms the worker up with every node's report, then sends
// acknowledged reports at deltaRate for --duration while counting the
// updates on both subjects, and checks the final aggregate.
func measureDelta(ctx context.Context, url string, sc scenario, d time.Duration) (deltaResult, error) {
	nc, err := connect(url, "loadtest-delta")
	if err != nil {
		return deltaResult{}, err
	}
	defer nc.Close()
	g, err := loadgen.New(nc, loadgen.Config{Nodes: sc.nodes, Flows: sc.flows, Rate: deltaRate, Duration: d, Timeout: requestTimeout})
	if err != nil {
		return deltaResult{}, err
	}
	if err := g.WarmUp(ctx); err != nil {
		return deltaResult{}, err
	}
	cl, err := client.New(nc, client.Options{Prefix: prefix, Timeout: requestTimeout, MaxFlows: math.MaxInt, MaxGetBytes: math.MaxInt}) // its own worker, of any size
	if err != nil {
		return deltaResult{}, err
	}
	st, err := cl.Get(ctx)
	if err != nil {
		return deltaResult{}, fmt.Errorf("get after the warm-up: %w", err)
	}
	u := &updateCounter{from: st.Revision}
	subs := protocol.SubjectsOf(prefix)
	if _, err := nc.Subscribe(subs.State, u.onFull); err != nil {
		return deltaResult{}, err
	}
	if _, err := nc.Subscribe(subs.Delta, u.onDelta); err != nil {
		return deltaResult{}, err
	}
	if err := nc.FlushTimeout(requestTimeout); err != nil {
		return deltaResult{}, err
	}
	res := g.Run(ctx)
	if res.FirstError != nil {
		return deltaResult{}, res.FirstError
	}
	// The updates of the last reports follow within a publish interval;
	// the means do not need them.
	u.mu.Lock()
	r := deltaResult{full: u.full, delta: u.delta}
	u.from = 1<<64 - 1
	u.mu.Unlock()
	switch {
	case r.full.msgs == 0:
		return r, fmt.Errorf("no update on %s in %v", subs.State, d)
	case r.delta.msgs == 0:
		r.skipped = fmt.Sprintf("no update on %s in %v: the worker predates protocol v2 (or runs --state-updates full)", subs.Delta, d)
	}
	r.check, err = checkAggregate(ctx, g, 0)
	return r, err
}

// deltaTargets is the delta target (a delta update within 2% of the full
// one), when the delta scenario ran.
func deltaTargets(find func(string) []runResult) []target {
	runs := find("delta")
	if len(runs) == 0 {
		return nil
	}
	t := target{name: "delta update <= 2% of the full update, 10,000 flows, 10 nodes reporting per 100 ms"}
	var ratios, full, delta []float64
	for _, r := range runs {
		if r.delta == nil || r.delta.skipped != "" {
			continue
		}
		ratios = append(ratios, r.delta.ratio())
		full = append(full, r.delta.full.perUpdate())
		delta = append(delta, r.delta.delta.perUpdate())
	}
	if len(ratios) == 0 {
		t.verdict, t.detail = "skipped", runs[0].delta.skipped
		return []target{t}
	}
	ratio := spreadOf(ratios)
	t.verdict = verdict(ratio.med <= 0.02, spread{med: -ratio.med, min: -ratio.max, max: -ratio.min, n: ratio.n}, -0.02)
	t.detail = fmt.Sprintf("%.2f%% (%.2f..%.2f%%): %.0f bytes a delta vs %.0f a full update",
		100*ratio.med, 100*ratio.min, 100*ratio.max, spreadOf(delta).med, spreadOf(full).med)
	return []target{t}
}
