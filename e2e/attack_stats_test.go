package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	fsclient "github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// The fullest stats state the worker's default limits allow: 10,000 nodes
// (--max-nodes) of 10 flows each, 100,000 flows (--max-total-flows), and
// 100,000 errors (--max-errors) whose messages together reach
// --max-error-bytes (16 MiB: 167 bytes each).
const (
	fullestNodes        = state.DefaultMaxNodes
	fullestFlowsPerNode = state.DefaultMaxTotalFlows / state.DefaultMaxNodes
	fullestErrorLen     = state.DefaultMaxErrorBytes / state.DefaultMaxErrors
)

// fullestReport is node's report (node in 1..fullestNodes) in the fullest
// stats state: its 10 flows with their state size, last execution time and
// processed rows, and 10 errors, three on each of the first three flows and
// one on the fourth, each message a number of its own padded to
// fullestErrorLen bytes.
func fullestReport(node uint64) fsclient.Report {
	r := fsclient.Report{NodeID: node,
		Value:  flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{}, LastExecTimeMap: map[flowstate.FlowID]int64{}},
		Health: flowstate.Health{HasProcessedRows: true, HasLastErrors: true}}
	errs := 0
	for k := range fullestFlowsPerNode {
		id := flowstate.FlowID((node-1)*fullestFlowsPerNode + uint64(k))
		r.Value.StateSize[id], r.Value.LastExecTimeMap[id] = 1<<20, 1_700_000_000_000
		f := flowstate.FlowHealth{ID: id, Has: flowstate.HasProcessedRows, ProcessedRows: 52_000}
		for range min(max(10-3*k, 0), 3) {
			f.Has |= flowstate.HasLastErrors
			n := (node-1)*10 + uint64(errs)
			f.LastErrors = append(f.LastErrors, flowstate.FlowError{Time: 1_700_000_000_000 + int64(errs),
				Message: fmt.Sprintf("%0*d", fullestErrorLen, n)})
			errs++
		}
		r.Health.Flows = append(r.Health.Flows, f)
	}
	return r
}

// fillFullest sends the reports of nodes first..fullestNodes from senders
// clients at once, each on a connection of its own and waiting for each
// ack, and requires every report acked.
func fillFullest(t *testing.T, w *workerProc, first uint64, senders int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, senders)
	for s := range senders {
		c, err := fsclient.New(connect(t, w.URL), fsclient.Options{Prefix: w.Prefix, Unnumbered: true})
		require.NoError(t, err)
		wg.Go(func() {
			for node := first + uint64(s); node <= fullestNodes && errs[s] == nil; node += uint64(senders) {
				if _, err := c.Send(context.Background(), fullestReport(node)); err != nil {
					errs[s] = fmt.Errorf("node %d: %w", node, err)
				}
			}
		})
	}
	wg.Wait()
	for s, err := range errs {
		require.NoError(t, err, "sender %d", s)
	}
}

// requireFullestView requires view to be the whole fullest stats state:
// every flow, every flow's health, every error.
func requireFullestView(t *testing.T, view flowstate.StatsView) {
	t.Helper()
	errs := 0
	for _, f := range view.Stats {
		errs += len(f.LastErrors)
	}
	require.Len(t, view.Flows, state.DefaultMaxTotalFlows, "flows in the stats view")
	require.Len(t, view.Stats, state.DefaultMaxTotalFlows, "flows with health in the stats view")
	require.Equal(t, state.DefaultMaxErrors, errs, "errors in the stats view")
}

// acksWithin returns the latencies of p's reports answered within the
// next window while load runs back to back (nil: nothing runs); a load
// that began in the window runs to its end.
func acksWithin(t *testing.T, p *probe, window time.Duration, load func()) []time.Duration {
	t.Helper()
	mark, _, _, _ := p.counts()
	cut := make(chan []time.Duration, 1)
	time.AfterFunc(window, func() {
		acks, _ := p.acksSince(mark)
		cut <- acks
	})
	for end := time.Now().Add(window); load != nil && time.Now().Before(end); {
		load()
	}
	select {
	case acks := <-cut:
		return acks
	case <-p.done:
		require.FailNow(t, "the probe stopped")
		return nil
	}
}

// TestAttackStatsOfTheFullestDefaultState (heavy): a worker process with
// the default limits, on a nats-server of the default 1 MiB max payload,
// is filled through heartbeat reports over NATS to the fullest stats state
// those limits allow. A node then reports every 10 ms on a connection of
// its own while, in alternating windows of the same length, nothing else
// runs or chunked stats gets run back to back. Every get returns the whole
// view, every report is acked, and the worker's peak RSS stays under the
// chart's memory limit. The latencies are logged (FIGURES), not asserted.
func TestAttackStatsOfTheFullestDefaultState(t *testing.T) {
	requireHeavy(t)
	const (
		senders     = 8
		rounds      = 3
		window      = 6 * time.Second
		every       = 10 * time.Millisecond
		chartMemory = 512 << 10 // KiB: resources.limits.memory in deploy/helm/flowstate/values.yaml
		getTimeout  = time.Minute
	)
	srv := startServer(t)
	w := startWorker(t, srv.URL)
	start := time.Now()
	// The probe's node is filled first, by the probe's own body: its
	// reports then change nothing the gets read.
	probeBody := fullestReport(1).AppendMsgpack(nil)
	newClient(t, w).report(1, probeBody)
	fillFullest(t, w, 2, senders)
	filled := time.Since(start)

	stats, err := fsclient.New(connect(t, w.URL), fsclient.Options{Prefix: w.Prefix, Timeout: getTimeout})
	require.NoError(t, err)
	view, _, err := stats.GetStats(context.Background())
	require.NoError(t, err, "a stats get of the filled state")
	requireFullestView(t, view)
	rssFilled, err := peakRSSKiB(w)
	require.NoError(t, err)
	t.Logf("filled %d nodes, %d flows, %d errors of %d bytes from %d senders in %v; peak RSS after the fill and a get %d MiB",
		fullestNodes, state.DefaultMaxTotalFlows, state.DefaultMaxErrors, fullestErrorLen, senders, filled.Round(time.Millisecond), rssFilled/1024)
	t.Logf("%d rounds of %v without gets then %v of back-to-back chunked stats gets; a report every %v", rounds, window, window, every)

	p := startReportProbe(t, w, 1, probeBody, every)
	var idle, during, gets []time.Duration
	getStats := func() {
		began := time.Now()
		v, _, err := stats.GetStats(context.Background())
		gets = append(gets, time.Since(began))
		require.NoError(t, err, "a stats get while the node reports")
		requireFullestView(t, v)
	}
	for r := range rounds {
		quiet := acksWithin(t, p, window, nil)
		busy := acksWithin(t, p, window, getStats)
		t.Logf("round %d: ack without gets %s; ack during gets %s", r+1, latencies(quiet, nil), latencies(busy, nil))
		idle, during = append(idle, quiet...), append(during, busy...)
	}
	p.halt()
	_, ackFails := p.acksSince(0)
	rss, err := peakRSSKiB(w)
	require.NoError(t, err)

	t.Logf("stats gets: %v", gets)
	t.Logf("FIGURES stats of the fullest default state: worker %s; ack without gets %s; ack during gets %s; chunked stats get %s; peak RSS %d MiB",
		bin.worker, latencies(idle, nil), latencies(during, nil), latencies(gets, nil), rss/1024)
	assert.Empty(t, ackFails, "the node's reports are all acked")
	assert.NotEmpty(t, idle, "acks without gets")
	assert.NotEmpty(t, during, "acks during gets")
	assert.Less(t, rss, chartMemory, "peak RSS (KiB) under the chart's memory limit")
}
