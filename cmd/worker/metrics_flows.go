package main

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// maxMetricsFlows bounds --metrics-flows, and with it the label set of the
// per-flow metrics.
const maxMetricsFlows = 1000

// flowsTimeout bounds the copy of the state that a scrape may make.
const flowsTimeout = 2 * time.Second

// flowsCollector exposes per-flow metrics, labelled flow_id, for the flows
// it watches: the n flows with the largest state, the n with the most
// processed rows (the stats view's, the most any node reports) and the n
// whose newest error is the newest, each flow once (at most 3n flows). The
// last two make the flows of GreptimeDB's batching engine, which reports
// no state size, and failing flows, whose state is often small, watched
// too.
//
// A scrape reuses the last selection if it is younger than every (the
// publish interval), so that scrapes cost at most one copy of the state's
// stats per publish interval; that copy is the only work done under the
// state's lock, and the selection is made outside it. A flow that leaves
// the selection leaves the metrics at the next refresh. Each refresh
// also counts the watched flows' processed rows (rowsCounter).
type flowsCollector struct {
	mgr   consumer.State
	n     int
	every time.Duration
	now   func() time.Time

	size, lastExec, start *prometheus.Desc
	rows, lastError       *prometheus.Desc

	// mu serialises refreshes, so that concurrent scrapes copy once, and
	// guards the fields below.
	mu      sync.Mutex
	at      time.Time   // when watched was selected; zero before the first time
	watched []flowWatch // the watched flows, sorted by ID
	counter rowsCounter
	// Scratch space of a refresh.
	bySize   []flowstate.Flow
	byHealth []flowstate.FlowStats
}

// flowWatch is a watched flow: its aggregate entry and its stats.
type flowWatch struct {
	id     flowstate.FlowID
	flow   flowstate.Flow      // Has 0 if the aggregate has no entry
	stats  flowstate.FlowStats // Has 0 if no node reports its health
	counts *flowRows           // its processed rows as counted; nil until a node reports them
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
		size:     d("state_size_bytes", "State size of a flow (the most any node reports), for the flows --metrics-flows watches."),
		lastExec: d("last_exec_time_seconds", "Last execution time of a flow, unix seconds (time() - this is how long ago it ran)."),
		start:    d("start_time_seconds", "Start time of a flow, unix seconds (time() - this is its age)."),
		rows: d("processed_rows_total", "Rows a flow processed (protocol v3 processed_rows), summed over the nodes that report them, "+
			"counted by this worker from 0 since it began to watch the flow: use rate() or increase(). "+
			"At each refresh a node adds what its count rose above the most it reported under its node_epoch; "+
			"all of its count when it reports another node_epoch (a restarted process), when it sends no node_epoch and its count went down, "+
			"or when it starts to report the flow; nothing when its count goes down under the same node_epoch (a late report) or when it stops. "+
			"It never goes down while the flow stays watched."),
		lastError: d("last_error_time_seconds", "Time of a flow's newest error over all nodes (protocol v3 last_errors), unix seconds, as the flownode's clock tells it."),
		counter:   newRowsCounter(),
	}
}

func (c *flowsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.lastExec
	ch <- c.start
	ch <- c.rows
	ch <- c.lastError
}

func (c *flowsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshLocked()
	for i := range c.watched {
		w := &c.watched[i]
		id := strconv.FormatUint(uint64(w.id), 10)
		f := &w.flow
		if f.Has&flowstate.HasStateSize != 0 {
			ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(f.StateSize), id)
		}
		if f.Has&flowstate.HasLastExecTime != 0 {
			ch <- prometheus.MustNewConstMetric(c.lastExec, prometheus.GaugeValue, unixSeconds(f.LastExecTime), id)
		}
		if f.Has&flowstate.HasStartTime != 0 {
			ch <- prometheus.MustNewConstMetric(c.start, prometheus.GaugeValue, unixSeconds(f.StartTime), id)
		}
		if w.counts != nil && w.counts.reported {
			ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(w.counts.total), id)
		}
		if len(w.stats.LastErrors) > 0 {
			ch <- prometheus.MustNewConstMetric(c.lastError, prometheus.GaugeValue, unixSeconds(w.stats.LastErrors[0].Time), id)
		}
	}
}

// refreshLocked selects the watched flows again and counts their rows,
// unless the last selection is younger than c.every. On an error (a shared
// store not loaded yet, or its watch catching up) it keeps the last
// selection and tries again at the next scrape.
func (c *flowsCollector) refreshLocked() {
	now := c.now()
	if !c.at.IsZero() && now.Sub(c.at) < c.every {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flowsTimeout)
	defer cancel()
	s, err := c.mgr.Stats(ctx)
	if err != nil {
		return
	}
	c.watched = c.selectLocked(c.watched[:0], &s)
	c.counter.refresh(c.watched, s.Nodes)
	c.at = now
}

// selectLocked appends to dst the watched flows of s, sorted by ID.
func (c *flowsCollector) selectLocked(dst []flowWatch, s *state.Stats) []flowWatch {
	c.bySize = largestFlows(c.bySize[:0], s.Flows, c.n)
	ids := make(map[flowstate.FlowID]struct{}, 3*c.n)
	for _, f := range c.bySize {
		ids[f.ID] = struct{}{}
	}
	c.byHealth = topN(c.byHealth[:0], s.Health, c.n, fewerRows)
	for _, f := range c.byHealth {
		if f.Has&flowstate.HasProcessedRows != 0 {
			ids[f.ID] = struct{}{}
		}
	}
	c.byHealth = topN(c.byHealth[:0], s.Health, c.n, olderError)
	for _, f := range c.byHealth {
		if len(f.LastErrors) > 0 {
			ids[f.ID] = struct{}{}
		}
	}
	for id := range ids {
		dst = append(dst, flowWatch{id: id})
	}
	slices.SortFunc(dst, func(a, b flowWatch) int { return cmp.Compare(a.id, b.id) })
	// Both lists are sorted by ID: one pass fills in each watched flow.
	i, k := 0, 0
	for w := range dst {
		id := dst[w].id
		for i < len(s.Flows) && s.Flows[i].ID < id {
			i++
		}
		if i < len(s.Flows) && s.Flows[i].ID == id {
			dst[w].flow = s.Flows[i]
		}
		for k < len(s.Health) && s.Health[k].ID < id {
			k++
		}
		if k < len(s.Health) && s.Health[k].ID == id {
			dst[w].stats = s.Health[k]
		}
	}
	return dst
}

// fewerRows reports whether a ranks below b by processed rows: fewer (a
// flow without them has none), or as many and a larger id.
func fewerRows(a, b flowstate.FlowStats) bool {
	ra, rb := rowsOf(a), rowsOf(b)
	if ra != rb {
		return ra < rb
	}
	return a.ID > b.ID
}

func rowsOf(s flowstate.FlowStats) uint64 {
	if s.Has&flowstate.HasProcessedRows == 0 {
		return 0
	}
	return s.ProcessedRows
}

// olderError reports whether a ranks below b by its newest error: none
// while b has one, an older one, or as new and a larger id.
func olderError(a, b flowstate.FlowStats) bool {
	if (len(a.LastErrors) > 0) != (len(b.LastErrors) > 0) {
		return len(b.LastErrors) > 0
	}
	if len(a.LastErrors) > 0 && a.LastErrors[0].Time != b.LastErrors[0].Time {
		return a.LastErrors[0].Time < b.LastErrors[0].Time
	}
	return a.ID > b.ID
}

// unixSeconds converts unix milliseconds to seconds.
func unixSeconds(ms int64) float64 { return float64(ms) / 1e3 }

// largestFlows appends to dst the n flows of flows with the largest state
// size, largest first, ties broken by the smaller id; a flow without a size
// counts as 0 (topN).
func largestFlows(dst, flows []flowstate.Flow, n int) []flowstate.Flow {
	return topN(dst, flows, n, smaller)
}

// smaller reports whether a ranks below b: a smaller state, or the same
// state and a larger id.
func smaller(a, b flowstate.Flow) bool {
	if a.StateSize != b.StateSize {
		return a.StateSize < b.StateSize
	}
	return a.ID > b.ID
}

// topN appends to dst the n items of items that rank highest by below
// (below(a, b): a ranks below b; a strict order), highest first. It keeps
// a min-heap of n items, so its cost is O(len(items) log n) and it
// allocates nothing when dst has room for n.
func topN[T any](dst, items []T, n int, below func(a, b T) bool) []T {
	if n <= 0 {
		return dst
	}
	base := len(dst)
	for _, f := range items {
		heap := dst[base:]
		switch {
		case len(heap) < n:
			dst = append(dst, f)
			siftUp(dst[base:], len(heap), below)
		case below(heap[0], f):
			heap[0] = f
			siftDown(heap, 0, below)
		}
	}
	slices.SortFunc(dst[base:], func(a, b T) int {
		if below(a, b) {
			return 1
		}
		if below(b, a) {
			return -1
		}
		return 0
	})
	return dst
}

func siftUp[T any](h []T, i int, below func(a, b T) bool) {
	for i > 0 {
		p := (i - 1) / 2
		if !below(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func siftDown[T any](h []T, i int, below func(a, b T) bool) {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && below(h[l], h[least]) {
			least = l
		}
		if r < len(h) && below(h[r], h[least]) {
			least = r
		}
		if least == i {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}
