package main

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
)

// maxMetricsFlows bounds --metrics-flows, and with it the label set of the
// per-flow metrics.
const maxMetricsFlows = 1000

// flowsTimeout bounds the copy of the aggregate that a scrape may make.
const flowsTimeout = 2 * time.Second

// flowsCollector exposes the n flows with the largest state as gauges with
// a flow_id label. A scrape reuses the last selection if it is younger than
// every (the publish interval), so that scrapes cost at most one copy of the
// aggregate per publish interval; that copy is the only work done under the
// state's lock, and the selection is made outside it. A flow that leaves the
// top n leaves the metrics at the next refresh.
type flowsCollector struct {
	mgr   consumer.State
	n     int
	every time.Duration
	now   func() time.Time

	size, lastExec, start *prometheus.Desc

	// mu serialises refreshes, so that concurrent scrapes copy once, and
	// guards the fields below.
	mu    sync.Mutex
	at    time.Time        // when top was selected; zero before the first time
	flows []flowstate.Flow // the last copy of the aggregate, reused
	top   []flowstate.Flow // the n largest flows of that copy, largest first
}

func newFlowsCollector(mgr consumer.State, n int, every time.Duration) *flowsCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("flowstate_flow_"+name, help, []string{"flow_id"}, nil)
	}
	return &flowsCollector{
		mgr:      mgr,
		n:        n,
		every:    every,
		now:      time.Now,
		size:     d("state_size_bytes", "State size of a flow, for the --metrics-flows flows with the largest state."),
		lastExec: d("last_exec_time_seconds", "Last execution time of a flow, unix seconds (time() - this is how long ago it ran)."),
		start:    d("start_time_seconds", "Start time of a flow, unix seconds (time() - this is its age)."),
	}
}

func (c *flowsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.lastExec
	ch <- c.start
}

func (c *flowsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshLocked()
	for _, f := range c.top {
		id := strconv.FormatUint(uint64(f.ID), 10)
		if f.Has&flowstate.HasStateSize != 0 {
			ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(f.StateSize), id)
		}
		if f.Has&flowstate.HasLastExecTime != 0 {
			ch <- prometheus.MustNewConstMetric(c.lastExec, prometheus.GaugeValue, unixSeconds(f.LastExecTime), id)
		}
		if f.Has&flowstate.HasStartTime != 0 {
			ch <- prometheus.MustNewConstMetric(c.start, prometheus.GaugeValue, unixSeconds(f.StartTime), id)
		}
	}
}

// refreshLocked selects the top flows again unless the last selection is
// younger than c.every. On an error (a shared store not loaded yet) it keeps
// the last selection and tries again at the next scrape.
func (c *flowsCollector) refreshLocked() {
	now := c.now()
	if !c.at.IsZero() && now.Sub(c.at) < c.every {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flowsTimeout)
	defer cancel()
	s, err := c.mgr.Snapshot(ctx, c.flows)
	if err != nil {
		return
	}
	c.flows = s.Flows
	c.top = largestFlows(c.top[:0], c.flows, c.n)
	c.at = now
}

// unixSeconds converts unix milliseconds to seconds.
func unixSeconds(ms int64) float64 { return float64(ms) / 1e3 }

// largestFlows appends to dst the n flows of flows with the largest state
// size, largest first, ties broken by the smaller id; a flow without a size
// counts as 0. It keeps a min-heap of n flows, so its cost is
// O(len(flows) log n) and it allocates nothing when dst has room for n.
func largestFlows(dst, flows []flowstate.Flow, n int) []flowstate.Flow {
	if n <= 0 {
		return dst
	}
	base := len(dst)
	for _, f := range flows {
		heap := dst[base:]
		switch {
		case len(heap) < n:
			dst = append(dst, f)
			siftUp(dst[base:], len(heap))
		case smaller(heap[0], f):
			heap[0] = f
			siftDown(heap, 0)
		}
	}
	slices.SortFunc(dst[base:], func(a, b flowstate.Flow) int {
		if smaller(a, b) {
			return 1
		}
		if smaller(b, a) {
			return -1
		}
		return 0
	})
	return dst
}

// smaller reports whether a ranks below b: a smaller state, or the same
// state and a larger id.
func smaller(a, b flowstate.Flow) bool {
	if a.StateSize != b.StateSize {
		return a.StateSize < b.StateSize
	}
	return a.ID > b.ID
}

func siftUp(h []flowstate.Flow, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !smaller(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func siftDown(h []flowstate.Flow, i int) {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && smaller(h[l], h[least]) {
			least = l
		}
		if r < len(h) && smaller(h[r], h[least]) {
			least = r
		}
		if least == i {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}
