package main

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

func TestLargestFlowsMatchesAFullSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ flows, n int }{{0, 3}, {2, 5}, {5, 5}, {100, 1}, {1000, 7}, {50, 0}} {
		flows := make([]flowstate.Flow, tc.flows)
		for i := range flows {
			// Few distinct sizes, so that ties are broken by id.
			flows[i] = flowstate.Flow{ID: flowstate.FlowID(i), Has: flowstate.HasStateSize, StateSize: rng.Uint64N(20)}
		}
		want := slices.Clone(flows)
		slices.SortFunc(want, func(a, b flowstate.Flow) int {
			if a.StateSize != b.StateSize {
				return -cmp.Compare(a.StateSize, b.StateSize)
			}
			return cmp.Compare(a.ID, b.ID)
		})
		want = want[:min(tc.n, len(want))]
		got := largestFlows(nil, flows, tc.n)
		assert.Equal(t, len(want), len(got), "%d flows, n %d", tc.flows, tc.n)
		if len(want) > 0 {
			assert.Equal(t, want, got, "%d flows, n %d", tc.flows, tc.n)
		}
	}
}

func TestFlowsCollectorExportsTheLargestFlowsAtThePublishCadence(t *testing.T) {
	ctx := context.Background()
	mgr := state.NewManager(state.Options{})
	merge := func(node uint64, flows ...flowstate.Flow) {
		t.Helper()
		_, err := mgr.Merge(ctx, state.Report{Node: node, Flows: flows})
		require.NoError(t, err)
	}
	all := flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime
	merge(1,
		flowstate.Flow{ID: 1, Has: all, StateSize: 10, LastExecTime: 1_700_000_123_500, StartTime: 1_600_000_000_000},
		flowstate.Flow{ID: 2, Has: flowstate.HasStateSize, StateSize: 30},
		flowstate.Flow{ID: 3, Has: flowstate.HasStateSize, StateSize: 20},
	)
	now := time.Unix(1000, 0)
	c := newFlowsCollector(mgr, 2, 100*time.Millisecond)
	c.now = func() time.Time { return now }
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	assert.Equal(t, map[string]float64{
		`flowstate_flow_state_size_bytes{flow_id="2"}`: 30,
		`flowstate_flow_state_size_bytes{flow_id="3"}`: 20,
	}, gatherGauges(t, reg))

	// Flow 1 grows past the others: not seen until a publish interval has
	// passed, then in, and flow 3 out, with its times.
	merge(1,
		flowstate.Flow{ID: 1, Has: all, StateSize: 50, LastExecTime: 1_700_000_123_500, StartTime: 1_600_000_000_000},
		flowstate.Flow{ID: 2, Has: flowstate.HasStateSize, StateSize: 30},
		flowstate.Flow{ID: 3, Has: flowstate.HasStateSize, StateSize: 20},
	)
	now = now.Add(50 * time.Millisecond)
	assert.Equal(t, map[string]float64{
		`flowstate_flow_state_size_bytes{flow_id="2"}`: 30,
		`flowstate_flow_state_size_bytes{flow_id="3"}`: 20,
	}, gatherGauges(t, reg), "the copy of the last publish interval")
	now = now.Add(50 * time.Millisecond)
	assert.Equal(t, map[string]float64{
		`flowstate_flow_state_size_bytes{flow_id="1"}`:       50,
		`flowstate_flow_last_exec_time_seconds{flow_id="1"}`: 1_700_000_123.5,
		`flowstate_flow_start_time_seconds{flow_id="1"}`:     1_600_000_000,
		`flowstate_flow_state_size_bytes{flow_id="2"}`:       30,
	}, gatherGauges(t, reg))
}

// rowsReport is a report of node from process epoch (0: no node_epoch)
// of the processed rows of flows, as flow id, rows pairs.
func rowsReport(node, epoch uint64, pairs ...uint64) state.Report {
	h := &flowstate.Health{HasProcessedRows: true}
	for i := 0; i+1 < len(pairs); i += 2 {
		h.Flows = append(h.Flows, flowstate.FlowHealth{ID: flowstate.FlowID(pairs[i]), Has: flowstate.HasProcessedRows, ProcessedRows: pairs[i+1]})
	}
	return state.Report{Node: node, NodeEpoch: epoch, HasNodeEpoch: epoch != 0, Health: h}
}

// rowsScraper scrapes a flows collector of a Manager after each step, a
// publish interval apart, and returns its processed rows counters.
type rowsScraper struct {
	t   *testing.T
	mgr *state.Manager
	c   *flowsCollector
	reg *prometheus.Registry
	now time.Time
}

func newRowsScraper(t *testing.T, n int) *rowsScraper {
	r := &rowsScraper{t: t, mgr: state.NewManager(state.Options{}), now: time.Unix(1000, 0)}
	r.c = newFlowsCollector(r.mgr, n, time.Second)
	r.c.now = func() time.Time { return r.now }
	r.reg = prometheus.NewPedanticRegistry()
	require.NoError(t, r.reg.Register(r.c))
	return r
}

func (r *rowsScraper) merge(reps ...state.Report) {
	r.t.Helper()
	for _, rep := range reps {
		_, err := r.mgr.Merge(r.t.Context(), rep)
		require.NoError(r.t, err)
	}
}

// scrape returns the counters, by flow id, a publish interval later.
func (r *rowsScraper) scrape() map[string]float64 {
	r.t.Helper()
	r.now = r.now.Add(time.Second)
	mfs, err := r.reg.Gather()
	require.NoError(r.t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "flowstate_flow_processed_rows_total" {
			continue
		}
		require.Equal(r.t, "COUNTER", mf.GetType().String())
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestProcessedRowsCounterNeverGoesBack: the rows counter of a flow sums
// each node's increases; a node's restart (a new node_epoch, its count
// starting over), the departure of the node with the most rows and a late
// report of a process never make it go down, so that rate() is right
// where a gauge of the stats view's value (the most any node reports)
// would fall.
func TestProcessedRowsCounterNeverGoesBack(t *testing.T) {
	r := newRowsScraper(t, 5)
	r.merge(rowsReport(1, 100, 7, 1000), rowsReport(2, 200, 7, 50))
	assert.Equal(t, map[string]float64{"7": 0}, r.scrape(), "the counter starts at 0 where the worker begins to watch the flow")

	r.merge(rowsReport(1, 100, 7, 1300), rowsReport(2, 200, 7, 80))
	assert.Equal(t, map[string]float64{"7": 330}, r.scrape(), "both nodes' increases")

	r.merge(rowsReport(1, 101, 7, 40)) // node 1 restarted: its count starts over
	assert.Equal(t, map[string]float64{"7": 370}, r.scrape(), "a new process's rows all count")

	r.merge(rowsReport(1, 101, 7, 30)) // a late report of the same process
	assert.Equal(t, map[string]float64{"7": 370}, r.scrape(), "a count that went down under one node_epoch adds nothing")
	r.merge(rowsReport(1, 101, 7, 45))
	assert.Equal(t, map[string]float64{"7": 375}, r.scrape(), "only what passes the most seen of the process")

	r.merge(rowsReport(2, 200)) // node 2 stops reporting the flow
	r.merge(rowsReport(1, 101, 7, 60))
	assert.Equal(t, map[string]float64{"7": 390}, r.scrape(), "a node that leaves takes nothing away")
	r.merge(rowsReport(2, 200, 7, 95))
	assert.Equal(t, map[string]float64{"7": 405}, r.scrape(), "back under the same node_epoch: what it processed meanwhile")

	r.merge(rowsReport(3, 0, 7, 500))
	assert.Equal(t, map[string]float64{"7": 905}, r.scrape(), "a node new to the flow: all its rows")
	r.merge(rowsReport(3, 0, 7, 20))
	assert.Equal(t, map[string]float64{"7": 925}, r.scrape(), "no node_epoch: a count that went down is a restart")
}

// TestProcessedRowsCounterKeepsTheLastLeftNodes: the counts of the nodes
// that stopped reporting a flow are kept for the last 8 of them only; one
// forgotten counts all its rows when it comes back, as a node new to the
// flow.
func TestProcessedRowsCounterKeepsTheLastLeftNodes(t *testing.T) {
	c := newRowsCounter()
	watched := []flowWatch{{id: 1}}
	report := func(nodes ...uint64) {
		var hs []state.NodeHealth
		for _, n := range nodes {
			rep := rowsReport(n, 100, 1, 10)
			hs = append(hs, state.NodeHealth{NodeHealth: flowstate.NodeHealth{NodeID: n, Health: rep.Health}, NodeEpoch: 100, HasNodeEpoch: true})
		}
		c.refresh(watched, hs)
	}
	report(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	report(3, 4, 5, 6, 7, 8, 9, 10) // 1 and 2 leave first
	report()                        // the others leave
	fr := c.flows[1]
	require.NotNil(t, fr)
	assert.Len(t, fr.nodes, maxLeftNodes)
	assert.NotContains(t, fr.nodes, uint64(1))
	assert.NotContains(t, fr.nodes, uint64(2))
	report(1, 3)
	assert.Equal(t, uint64(10), fr.total, "node 1 was forgotten: its 10 rows count; node 3's are those it had")
}

// TestProcessedRowsCounterFollowsTheWatchedFlows: the counter exists for
// the flows the collector watches, among them the n with the most rows,
// and starts over at 0 for a flow watched again.
func TestProcessedRowsCounterFollowsTheWatchedFlows(t *testing.T) {
	r := newRowsScraper(t, 1)
	r.merge(rowsReport(1, 100, 1, 10, 2, 500))
	assert.Equal(t, map[string]float64{"2": 0}, r.scrape(), "the flow with the most rows")
	r.merge(rowsReport(1, 100, 1, 10, 2, 520))
	assert.Equal(t, map[string]float64{"2": 20}, r.scrape())
	r.merge(rowsReport(1, 100, 1, 900, 2, 530))
	assert.Equal(t, map[string]float64{"1": 0}, r.scrape(), "flow 1 now has the most: watched from 0; flow 2 is not")
	r.merge(rowsReport(1, 100, 1, 900, 2, 2000))
	assert.Equal(t, map[string]float64{"2": 0}, r.scrape(), "watched again: from 0, not from its last value")
}

// TestFlowsCollectorWatchesTheFlowsWithTheNewestErrors: a failing flow is
// watched whatever its state size, with the time of its newest error over
// all nodes; a client's message is never a label.
func TestFlowsCollectorWatchesTheFlowsWithTheNewestErrors(t *testing.T) {
	r := newRowsScraper(t, 1)
	errorsOf := func(node uint64, id flowstate.FlowID, times ...int64) state.Report {
		f := flowstate.FlowHealth{ID: id, Has: flowstate.HasLastErrors}
		for _, at := range times {
			f.LastErrors = append(f.LastErrors, flowstate.FlowError{Time: at, Message: "sink table missing\n\x1b[31m"})
		}
		return state.Report{Node: node, Flows: []flowstate.Flow{{ID: 9, Has: flowstate.HasStateSize, StateSize: 1 << 20}},
			Health: &flowstate.Health{HasLastErrors: true, Flows: []flowstate.FlowHealth{f}}}
	}
	r.merge(errorsOf(1, 4, 1_700_000_002_000, 1_700_000_001_000), errorsOf(2, 4, 1_700_000_003_500), errorsOf(3, 5, 1_700_000_000_000))
	r.scrape()
	assert.Equal(t, map[string]float64{
		`flowstate_flow_state_size_bytes{flow_id="9"}`:        1 << 20,
		`flowstate_flow_last_error_time_seconds{flow_id="4"}`: 1_700_000_003.5,
	}, gatherGauges(t, r.reg), "the largest flow and the one with the newest error")
	mfs, err := r.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				assert.Equal(t, "flow_id", l.GetName())
				assert.NotContains(t, l.GetValue(), "sink")
			}
		}
	}
}

// gatherGauges returns every gauge of reg as name{label="value",...}: value.
func gatherGauges(tb testing.TB, reg *prometheus.Registry) map[string]float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	require.NoError(tb, err)
	out := make(map[string]float64)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetGauge() == nil {
				continue
			}
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

func TestMetricsFlowsFlagIsBounded(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--metrics-addr", "127.0.0.1:0", "--metrics-flows", "5"}, true},
		{[]string{"--metrics-addr", "127.0.0.1:0", "--metrics-flows", "-1"}, false},
		{[]string{"--metrics-addr", "127.0.0.1:0", "--metrics-flows", "1001"}, false},
		{[]string{"--metrics-flows", "5"}, false}, // nowhere to export them
	} {
		_, err := parseConfig(tc.args, noEnv, nil)
		if tc.ok {
			assert.NoError(t, err, tc.args)
		} else {
			assert.ErrorContains(t, err, "--metrics-flows", tc.args)
		}
	}
	cfg, err := parseConfig(nil, func(k string) string {
		switch k {
		case "FLOWSTATE_METRICS_FLOWS":
			return "7"
		case "FLOWSTATE_METRICS_ADDR":
			return "127.0.0.1:0"
		}
		return ""
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, 7, cfg.MetricsFlows)
}

// BenchmarkLargestFlows selects the 10 largest of 100,000 flows (the
// default --max-total-flows), as a refresh of the per-flow metrics does.
func BenchmarkLargestFlows(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	flows := make([]flowstate.Flow, 100_000)
	for i := range flows {
		flows[i] = flowstate.Flow{ID: flowstate.FlowID(i), Has: flowstate.HasStateSize, StateSize: rng.Uint64()}
	}
	var top []flowstate.Flow
	for b.Loop() {
		top = largestFlows(top[:0], flows, 10)
	}
}

// TestFlowErrorTimeFollowsTheNewestError: at each refresh the error time
// of a flow is its newest error over the nodes that report it now: a newer
// error moves it on, and a node that replaces its errors with older ones
// (or none) moves it back to what the others hold.
func TestFlowErrorTimeFollowsTheNewestError(t *testing.T) {
	r := newRowsScraper(t, 1)
	errorsAt := func(node uint64, times ...int64) state.Report {
		f := flowstate.FlowHealth{ID: 4, Has: flowstate.HasLastErrors}
		for _, at := range times {
			f.LastErrors = append(f.LastErrors, flowstate.FlowError{Time: at, Message: "query failed"})
		}
		return state.Report{Node: node, Health: &flowstate.Health{HasLastErrors: true, Flows: []flowstate.FlowHealth{f}}}
	}
	const key = `flowstate_flow_last_error_time_seconds{flow_id="4"}`
	errorTime := func() float64 {
		r.scrape()
		return gatherGauges(t, r.reg)[key]
	}
	r.merge(errorsAt(1, 1_700_000_010_000), errorsAt(2, 1_700_000_005_000))
	assert.Equal(t, 1_700_000_010.0, errorTime(), "the newest of both nodes")
	r.merge(errorsAt(2, 1_700_000_020_000, 1_700_000_005_000))
	assert.Equal(t, 1_700_000_020.0, errorTime(), "a newer error of another node moves it on")
	r.merge(errorsAt(2, 1_700_000_001_000))
	assert.Equal(t, 1_700_000_010.0, errorTime(), "the node that held the newest now holds an older one")
	r.merge(errorsAt(1, 1_700_000_030_000))
	assert.Equal(t, 1_700_000_030.0, errorTime(), "a later error of the first node")
}
