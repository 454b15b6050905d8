package flowstate_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

func TestNodeJSONIsTheProtocolExample(t *testing.T) {
	flows := []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 1024}}
	h := &flowstate.Health{
		HasProcessedRows: true, HasSeq: true, Seq: 41,
		Flows: []flowstate.FlowHealth{{ID: 1, Has: flowstate.HasProcessedRows, ProcessedRows: 52000}},
	}
	got := flowstate.AppendNodeJSON(nil, flows, 1700000000000, true, h)
	assert.Equal(t, `{"state_size":{"1":1024},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{"1":52000},"node_epoch":1700000000000,"seq":41}`, string(got))
}

func TestNodeJSONWithoutV3FieldsIsTheSeedForm(t *testing.T) {
	flows := []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 1024}}
	want := string(flowstate.AppendJSON(nil, flows))
	assert.Equal(t, want, string(flowstate.AppendNodeJSON(nil, flows, 5, true, nil)))
	assert.Equal(t, want, string(flowstate.AppendNodeJSON(nil, flows, 5, true, &flowstate.Health{})))
}

// A value without v3 fields whose node has retired epochs to remember
// carries them, and its node_epoch, after the seed's JSON: the stale rule
// holds for the node's earlier processes after an unnumbered report.
func TestNodeJSONKeepsRetiredEpochsWithoutV3Fields(t *testing.T) {
	flows := []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 1024}}
	seed := `{"state_size":{"1":1024},"last_exec_time_map":{},"start_time_map":{}`
	h := &flowstate.Health{RetiredEpochs: []uint64{1}}
	assert.Equal(t, seed+`,"node_epoch":5,"retired_epochs":[1]}`, string(flowstate.AppendNodeJSON(nil, flows, 5, true, h)))
	assert.Equal(t, seed+`,"retired_epochs":[1]}`, string(flowstate.AppendNodeJSON(nil, flows, 0, false, h)))
}

// A seq without node_epoch orders nothing and is not stored.
func TestNodeJSONStoresNoSeqWithoutNodeEpoch(t *testing.T) {
	flows := []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 1024}}
	got := flowstate.AppendNodeJSON(nil, flows, 0, false, &flowstate.Health{HasSeq: true, Seq: 9})
	assert.Equal(t, `{"state_size":{"1":1024},"last_exec_time_map":{},"start_time_map":{}}`, string(got))
}

func TestNodeJSONWritesEveryFieldInOrder(t *testing.T) {
	h := &flowstate.Health{
		HasProcessedRows: true, HasLastErrors: true, HasSeq: true, Seq: 3,
		Flows: []flowstate.FlowHealth{
			{ID: 2, Has: flowstate.HasLastErrors},
			{ID: 10, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 7,
				LastErrors: []flowstate.FlowError{{Time: 20, Message: "b"}, {Time: -1, Message: "a\"\\/\n"}}},
		},
		RetiredEpochs: []uint64{100, 200},
	}
	got := flowstate.AppendNodeJSON(nil, nil, 300, true, h)
	assert.Equal(t, `{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{"10":7},`+
		`"last_errors":{"2":[],"10":[{"time":20,"message":"b"},{"time":-1,"message":"a\"\\/\n"}]},`+
		`"node_epoch":300,"seq":3,"retired_epochs":[100,200]}`, string(got))
	// The seed's decoder reads it as the node's value.
	_, err := flowstate.AppendValueFlows(nil, got)
	require.NoError(t, err)
}

func TestJSONStringEscapesAsSerdeJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{`q"b\`, `"q\"b\\"`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"\x00\x1f\x7f", `"\u0000\u001f` + "\x7f" + `"`},
		{"a/b é 日本", `"a/b é 日本"`},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, string(flowstate.AppendJSONString(nil, tt.in)), "%q", tt.in)
	}
}

func TestStatsJSONIsTheProtocolExample(t *testing.T) {
	flows := []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 1024, LastExecTime: 1700000000000}}
	stats := flowstate.MergeHealth(nil, []flowstate.NodeHealth{{NodeID: 7, Health: &flowstate.Health{
		HasProcessedRows: true, HasLastErrors: true,
		Flows: []flowstate.FlowHealth{{ID: 1, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 52000,
			LastErrors: []flowstate.FlowError{{Time: 1700000000000, Message: "sink table missing"}}}},
	}}})
	got := flowstate.AppendStatsJSON(nil, flows, stats)
	assert.Equal(t, `{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{},"processed_rows":{"1":52000},"last_errors":{"1":[{"time":1700000000000,"node_id":7,"message":"sink table missing"}]}}`, string(got))
}

func errs(pairs ...any) []flowstate.FlowError {
	var out []flowstate.FlowError
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, flowstate.FlowError{Time: int64(pairs[i].(int)), Message: pairs[i+1].(string)})
	}
	return out
}

func TestMergeHealthKeepsMaxRowsAndThreeNewestErrors(t *testing.T) {
	node := func(id uint64, fl ...flowstate.FlowHealth) flowstate.NodeHealth {
		return flowstate.NodeHealth{NodeID: id, Health: &flowstate.Health{HasProcessedRows: true, HasLastErrors: true, Flows: fl}}
	}
	both := flowstate.HasProcessedRows | flowstate.HasLastErrors
	got := flowstate.MergeHealth(nil, []flowstate.NodeHealth{
		// Given out of node order: ties still go to the lower node id.
		node(9, flowstate.FlowHealth{ID: 5, Has: both, ProcessedRows: 10, LastErrors: errs(30, "n9-a", 10, "n9-b")}),
		node(2, flowstate.FlowHealth{ID: 5, Has: both, ProcessedRows: 99, LastErrors: errs(30, "n2-a", 30, "n2-b", 5, "n2-c")},
			flowstate.FlowHealth{ID: 1, Has: flowstate.HasLastErrors}),
		{NodeID: 3},
	})
	require.Len(t, got, 1, "a flow with an empty error list and no rows is not in the view")
	assert.Equal(t, flowstate.FlowID(5), got[0].ID)
	assert.Equal(t, uint64(99), got[0].ProcessedRows)
	assert.Equal(t, []flowstate.StatsError{
		{Time: 30, NodeID: 2, Message: "n2-a"}, {Time: 30, NodeID: 2, Message: "n2-b"}, {Time: 30, NodeID: 9, Message: "n9-a"},
	}, got[0].LastErrors)
}

func TestMergeHealthRowsOnlyFromNodesThatReportThem(t *testing.T) {
	got := flowstate.MergeHealth(nil, []flowstate.NodeHealth{{NodeID: 1, Health: &flowstate.Health{HasLastErrors: true,
		Flows: []flowstate.FlowHealth{{ID: 4, Has: flowstate.HasLastErrors, LastErrors: errs(1, "x")}}}}})
	require.Len(t, got, 1)
	assert.Equal(t, flowstate.HasLastErrors, got[0].Has)
	assert.Equal(t, `{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{},"last_errors":{"4":[{"time":1,"node_id":1,"message":"x"}]}}`,
		string(flowstate.AppendStatsJSON(nil, nil, got)))
}

func TestDecodeNodeHealthRoundTrips(t *testing.T) {
	h := &flowstate.Health{
		HasProcessedRows: true, HasLastErrors: true, HasSeq: true, Seq: 3,
		Flows: []flowstate.FlowHealth{
			{ID: 2, Has: flowstate.HasLastErrors},
			{ID: 10, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 7,
				LastErrors: errs(20, "b", -1, "a\"\\/\n\x01é")},
		},
		RetiredEpochs: []uint64{100, 200},
	}
	data := flowstate.AppendNodeJSON(nil, nil, 300, true, h)
	var got flowstate.Health
	epoch, hasEpoch, err := flowstate.DecodeNodeHealth(data, &got)
	require.NoError(t, err)
	assert.True(t, hasEpoch)
	assert.Equal(t, uint64(300), epoch)
	got.Flows[0].LastErrors = nil // decoded as an empty slice
	assert.Equal(t, h, &got)
}

func TestDecodeNodeHealthOfASeedValueIsEmpty(t *testing.T) {
	var h flowstate.Health
	_, hasEpoch, err := flowstate.DecodeNodeHealth([]byte(`{"state_size":{"1":1},"last_exec_time_map":{},"start_time_map":{}}`), &h)
	require.NoError(t, err)
	assert.False(t, hasEpoch)
	assert.False(t, h.IsV3())
}

func TestDecodeNodeHealthRejectsBrokenV3Fields(t *testing.T) {
	const seed = `{"state_size":{},"last_exec_time_map":{},"start_time_map":{}`
	long := strings.Repeat("x", flowstate.MaxErrorMessage+1)
	tests := map[string]string{
		"more than 3 errors":         `,"last_errors":{"1":[{"time":1,"message":"a"},{"time":1,"message":"a"},{"time":1,"message":"a"},{"time":1,"message":"a"}]}}`,
		"error without time":         `,"last_errors":{"1":[{"message":"a"}]}}`,
		"error without message":      `,"last_errors":{"1":[{"time":1}]}}`,
		"empty message":              `,"last_errors":{"1":[{"time":1,"message":""}]}}`,
		"message over 1024 bytes":    `,"last_errors":{"1":[{"time":1,"message":"` + long + `"}]}}`,
		"message not UTF-8":          `,"last_errors":{"1":[{"time":1,"message":"` + "\xff" + `"}]}}`,
		"time outside int64":         `,"last_errors":{"1":[{"time":9223372036854775808,"message":"a"}]}}`,
		"time a float":               `,"last_errors":{"1":[{"time":1.5,"message":"a"}]}}`,
		"negative processed rows":    `,"processed_rows":{"1":-1}}`,
		"flow id with leading 0":     `,"processed_rows":{"01":1}}`,
		"flow id past uint32":        `,"processed_rows":{"4294967296":1}}`,
		"flow named twice":           `,"processed_rows":{"1":1,"1":2}}`,
		"seq negative":               `,"seq":-1}`,
		"node_epoch a string":        `,"node_epoch":"1","seq":1}`,
		"more than 8 retired":        `,"node_epoch":10,"seq":1,"retired_epochs":[1,2,3,4,5,6,7,8,9]}`,
		"seq twice":                  `,"node_epoch":10,"seq":1,"seq":5}`,
		"node_epoch twice":           `,"node_epoch":10,"node_epoch":11,"seq":1}`,
		"a null error list":          `,"last_errors":{"1":null}}`,
		"a lone high surrogate":      `,"last_errors":{"1":[{"time":1,"message":"a\ud800"}]}}`,
		"a lone low surrogate":       `,"last_errors":{"1":[{"time":1,"message":"\udc00a"}]}}`,
		"a high surrogate unpaired":  `,"last_errors":{"1":[{"time":1,"message":"\ud800\u0041"}]}}`,
		"seq without node_epoch":     `,"processed_rows":{"1":1},"seq":3}`,
		"a retired epoch twice":      `,"node_epoch":10,"seq":1,"retired_epochs":[1,1]}`,
		"its own node_epoch retired": `,"node_epoch":10,"seq":1,"retired_epochs":[1,10]}`,
		"processed_rows not a map":   `,"processed_rows":[1]}`,
	}
	for name, tail := range tests {
		t.Run(name, func(t *testing.T) {
			var h flowstate.Health
			_, _, err := flowstate.DecodeNodeHealth([]byte(seed+tail), &h)
			require.ErrorIs(t, err, flowstate.ErrInvalidValue)
			assert.False(t, h.IsV3(), "h is left empty")
		})
	}
}

// A surrogate pair, and a backslash escaped before "u", are a message's
// text: only a lone surrogate escape is refused.
func TestDecodeNodeHealthReadsSurrogatePairs(t *testing.T) {
	var h flowstate.Health
	_, _, err := flowstate.DecodeNodeHealth([]byte(`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"last_errors":{"1":[{"time":1,"message":"\ud83d\ude00 \\ud800"}]}}`), &h)
	require.NoError(t, err)
	assert.Equal(t, errs(1, "\U0001F600 \\ud800"), h.Flows[0].LastErrors)
}

func TestDecodeNodeHealthIgnoresUnknownKeysAndNull(t *testing.T) {
	var h flowstate.Health
	_, _, err := flowstate.DecodeNodeHealth([]byte(`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"last_errors":{"1":[{"time":1,"message":"a","code":[1]}]},"seq":null,"x":1}`), &h)
	require.NoError(t, err)
	assert.False(t, h.HasSeq)
	assert.Equal(t, errs(1, "a"), h.Flows[0].LastErrors)
}

func TestHealthCheckNamesTheFlow(t *testing.T) {
	h := &flowstate.Health{HasLastErrors: true, Flows: []flowstate.FlowHealth{{ID: 7, Has: flowstate.HasLastErrors, LastErrors: errs(1, "")}}}
	assert.Contains(t, h.Check(), "last_errors[7]")
	h.Flows[0].LastErrors = errs(1, "a")
	assert.Empty(t, h.Check())
	assert.Equal(t, 1, h.ErrorBytes())
}

func TestDecodeNodeHealthReadsEscapedFieldNames(t *testing.T) {
	var h flowstate.Health
	_, _, err := flowstate.DecodeNodeHealth([]byte(`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"s\u0065q":-1}`), &h)
	require.ErrorIs(t, err, flowstate.ErrInvalidValue, "a field name written with escapes is the same field")
}

func TestDistinctFlowsCountsEachIDOnce(t *testing.T) {
	flows := []flowstate.Flow{{ID: 1}, {ID: 5}, {ID: 9}}
	rows := func(id flowstate.FlowID) flowstate.FlowHealth {
		return flowstate.FlowHealth{ID: id, Has: flowstate.HasProcessedRows}
	}
	health := []flowstate.FlowHealth{rows(0), rows(5), rows(7), rows(9), rows(12)}
	assert.Equal(t, 6, flowstate.DistinctFlows(flows, health))
	assert.Equal(t, 3, flowstate.DistinctFlows(flows, nil))
	assert.Equal(t, 5, flowstate.DistinctFlows(nil, health))
	// A flow named only by an empty error array is named nowhere.
	empty := flowstate.FlowHealth{ID: 20, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{}}
	assert.Equal(t, 6, flowstate.DistinctFlows(flows, append(health, empty)))
}

// mergeBySort is MergeHealth's last_errors as the contract words it: every
// error of a flow sorted (newest first, equal times by node id, then in the
// node's order) and the first MaxFlowErrors kept.
func mergeBySort(nodes []flowstate.NodeHealth) map[flowstate.FlowID][]flowstate.StatsError {
	type c struct {
		node  uint64
		order int
		e     flowstate.FlowError
	}
	all := map[flowstate.FlowID][]c{}
	for _, n := range nodes {
		for _, f := range n.Health.Flows {
			for o, e := range f.LastErrors {
				all[f.ID] = append(all[f.ID], c{n.NodeID, o, e})
			}
		}
	}
	out := map[flowstate.FlowID][]flowstate.StatsError{}
	for id, cs := range all {
		sort.SliceStable(cs, func(i, j int) bool {
			a, b := cs[i], cs[j]
			if a.e.Time != b.e.Time {
				return a.e.Time > b.e.Time
			}
			if a.node != b.node {
				return a.node < b.node
			}
			return a.order < b.order
		})
		for _, x := range cs[:min(len(cs), flowstate.MaxFlowErrors)] {
			out[id] = append(out[id], flowstate.StatsError{Time: x.e.Time, NodeID: x.node, Message: x.e.Message})
		}
	}
	return out
}

// MergeHealth keeps each flow's newest errors as it goes, sorting none:
// on random nodes with many equal times, it keeps exactly what sorting
// every error keeps.
func TestMergeHealthKeepsWhatSortingEveryErrorKeeps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var nodes []flowstate.NodeHealth
		for n := range rng.IntN(6) + 1 {
			h := &flowstate.Health{HasLastErrors: true}
			for id := range flowstate.FlowID(rng.IntN(4) + 1) {
				var errs []flowstate.FlowError
				for k := range rng.IntN(4) {
					errs = append(errs, flowstate.FlowError{Time: int64(rng.IntN(3)), Message: fmt.Sprintf("r%d n%d f%d e%d", round, n, id, k)})
				}
				h.Flows = append(h.Flows, flowstate.FlowHealth{ID: id, Has: flowstate.HasLastErrors, LastErrors: errs})
			}
			nodes = append(nodes, flowstate.NodeHealth{NodeID: uint64(n), Health: h})
		}
		rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] }) // in any order
		want := mergeBySort(nodes)
		got := map[flowstate.FlowID][]flowstate.StatsError{}
		for _, s := range flowstate.MergeHealth(nil, nodes) {
			if len(s.LastErrors) > 0 {
				got[s.ID] = s.LastErrors
			}
		}
		require.Equal(t, want, got, "round %d", round)
	}
}

// StatsJSONLen is the length AppendStatsJSON writes, for views with every
// kind of field, escapes and extreme numbers.
func TestStatsJSONLenIsTheRenderedLength(t *testing.T) {
	flows := []flowstate.Flow{
		{ID: 0, Has: flowstate.HasStateSize, StateSize: math.MaxUint64},
		{ID: 9, Has: flowstate.HasLastExecTime | flowstate.HasStartTime, LastExecTime: math.MinInt64, StartTime: -1},
		{ID: math.MaxUint32, Has: flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime, StateSize: 10, LastExecTime: 100, StartTime: 0},
	}
	stats := []flowstate.FlowStats{
		{ID: 1, Has: flowstate.HasProcessedRows, ProcessedRows: 99},
		{ID: 9, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 0, LastErrors: []flowstate.StatsError{
			{Time: math.MinInt64, NodeID: math.MaxUint64, Message: "q\"b\\s/\x01\x1f\b\f\n\r\té日\u202e"},
			{Time: 0, NodeID: 0, Message: "x"}}},
		{ID: 10, Has: flowstate.HasLastErrors},
		{ID: 11, Has: flowstate.HasLastErrors, LastErrors: []flowstate.StatsError{{Time: 5, NodeID: 7, Message: "m"}}},
	}
	for _, c := range []struct {
		flows []flowstate.Flow
		stats []flowstate.FlowStats
	}{{nil, nil}, {flows, nil}, {nil, stats}, {flows, stats}, {flows[1:2], stats[1:2]}} {
		assert.Equal(t, len(flowstate.AppendStatsJSON(nil, c.flows, c.stats)), flowstate.StatsJSONLen(c.flows, c.stats), "%s", flowstate.AppendStatsJSON(nil, c.flows, c.stats))
	}
}
