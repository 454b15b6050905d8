package main

import (
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
				return -cmpUint(a.StateSize, b.StateSize)
			}
			return cmpUint(uint64(a.ID), uint64(b.ID))
		})
		want = want[:min(tc.n, len(want))]
		got := largestFlows(nil, flows, tc.n)
		assert.Equal(t, len(want), len(got), "%d flows, n %d", tc.flows, tc.n)
		if len(want) > 0 {
			assert.Equal(t, want, got, "%d flows, n %d", tc.flows, tc.n)
		}
	}
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
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
