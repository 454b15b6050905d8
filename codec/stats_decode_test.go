package codec

import (
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// statsOfVectors is the merged health a stats vector gives, as
// flowstate.FlowStats sorted by ID.
func statsOfVectors(tb testing.TB, rows []vRows, lists []vErrorList) []flowstate.FlowStats {
	tb.Helper()
	var out []flowstate.FlowStats
	at := func(id uint32) *flowstate.FlowStats {
		for i := range out {
			if out[i].ID == flowstate.FlowID(id) {
				return &out[i]
			}
		}
		out = append(out, flowstate.FlowStats{ID: flowstate.FlowID(id)})
		return &out[len(out)-1]
	}
	for _, r := range rows {
		n, err := strconv.ParseUint(r.Rows, 10, 64)
		require.NoError(tb, err)
		s := at(r.ID)
		s.Has |= flowstate.HasProcessedRows
		s.ProcessedRows = n
	}
	for _, l := range lists {
		s := at(l.ID)
		s.Has |= flowstate.HasLastErrors
		for _, e := range l.Errors {
			t, err := strconv.ParseInt(e.Time, 10, 64)
			require.NoError(tb, err)
			require.NotNil(tb, e.NodeID)
			node, err := strconv.ParseUint(*e.NodeID, 10, 64)
			require.NoError(tb, err)
			s.LastErrors = append(s.LastErrors, flowstate.StatsError{Time: t, NodeID: node, Message: e.Message})
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j-1].ID > out[j].ID; j-- {
			out[j-1], out[j] = out[j], out[j-1]
		}
	}
	return out
}

// normalStats makes an empty list nil.
func normalStats(stats []flowstate.FlowStats) []flowstate.FlowStats {
	if len(stats) == 0 {
		return nil
	}
	return stats
}

// TestDecodeStatsReadsTheVectors decodes each stats view of stats.json and
// requires the view the file describes, its JSON byte for byte and its
// msgpack re-encoded byte for byte; the chunks of a chunked case, decoded
// one by one and joined, are the whole view.
func TestDecodeStatsReadsTheVectors(t *testing.T) {
	var f statsFile
	readVectors(t, "stats.json", &f)
	require.NotEmpty(t, f.Cases)
	chunked := 0
	for _, tc := range f.Cases {
		v, err := DecodeStats(unhex(t, tc.Msgpack))
		require.NoError(t, err, tc.Name)
		assert.Equal(t, normalFlows(fromVFlows(t, tc.Flows)), normalFlows(v.Flows), tc.Name)
		assert.Equal(t, normalStats(statsOfVectors(t, tc.ProcessedRows, tc.LastErrors)), normalStats(v.Stats), tc.Name)
		assert.Equal(t, tc.JSON, string(v.AppendJSON(nil)), tc.Name)
		js, err := v.MarshalJSON()
		require.NoError(t, err)
		assert.Equal(t, tc.JSON, string(js), tc.Name)
		assert.Equal(t, tc.Msgpack, hex.EncodeToString(AppendStats(nil, v.Flows, v.Stats)), tc.Name)

		if len(tc.Chunks) == 0 {
			continue
		}
		chunked++
		var joined flowstate.StatsView
		for k, c := range tc.Chunks {
			part, err := DecodeStats(unhex(t, c))
			require.NoError(t, err, "%s: chunk %d", tc.Name, k)
			assert.Equal(t, c, hex.EncodeToString(AppendStats(nil, part.Flows, part.Stats)), "%s: chunk %d", tc.Name, k)
			joined.Flows = append(joined.Flows, part.Flows...)
			joined.Stats = append(joined.Stats, part.Stats...)
		}
		assert.Equal(t, tc.JSON, string(joined.AppendJSON(nil)), "%s: the chunks joined", tc.Name)
	}
	assert.Positive(t, chunked, "a case in chunks")
}

// statsBody starts a stats view map of n fields.
func statsBody(n int) *mp { return newMP().Map(n) }

// statsErr writes a stats view's error map {time, node_id, message}.
func (m *mp) statsErr(time int64, node uint64, msg string) *mp {
	return m.Map(3).Str("time").Int(time).Str("node_id").Uint(node).Str("message").Str(msg)
}

func TestDecodeStatsTakesAnyEncodersForm(t *testing.T) {
	body := statsBody(7).
		Str("last_errors").Map(3).
		Str("9").Array(1).Map(4).Str("message").Str("m9").Str("extra").Array(1).Map(0).Str("node_id").U64(3).Str("time").I64(-2).
		Uint(2).Array(2).statsErr(20, 1, "new").statsErr(10, 2, "old").
		Uint(5).Array(0). // an empty list: no errors
		Str("unknown").Map(1).Str("x").F64(1).
		Str("processed_rows").Map(2).U32(9).Uint(100).Str("4").U64(7).
		Str("start_time_map").Nil().
		Str("node_id").Uint(7). // not a field of the view: skipped
		Str("state_size").Map(2).Uint(9).Uint(1).Str("2").U16(2).
		Str("last_exec_time_map").Map(1).Uint(2).Int(-1).Bytes()
	v, err := DecodeStats(body)
	require.NoError(t, err)
	assert.Equal(t, []flowstate.Flow{
		{ID: 2, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 2, LastExecTime: -1},
		{ID: 9, Has: flowstate.HasStateSize, StateSize: 1},
	}, v.Flows)
	assert.Equal(t, []flowstate.FlowStats{
		{ID: 2, Has: flowstate.HasLastErrors, LastErrors: []flowstate.StatsError{{Time: 20, NodeID: 1, Message: "new"}, {Time: 10, NodeID: 2, Message: "old"}}},
		{ID: 4, Has: flowstate.HasProcessedRows, ProcessedRows: 7},
		{ID: 9, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 100, LastErrors: []flowstate.StatsError{{Time: -2, NodeID: 3, Message: "m9"}}},
	}, v.Stats)

	empty, err := DecodeStats(statsBody(2).Str("processed_rows").Nil().Str("last_errors").Nil().Bytes())
	require.NoError(t, err)
	assert.Empty(t, empty.Flows)
	assert.Empty(t, empty.Stats)

	onlyEmpty, err := DecodeStats(statsBody(1).Str("last_errors").Map(1).Uint(1).Array(0).Bytes())
	require.NoError(t, err)
	assert.Empty(t, onlyEmpty.Stats, "a flow with an empty error list and no rows is not in the view")
}

func TestDecodeStatsRejectsBrokenViews(t *testing.T) {
	errs := func(m *mp) *mp { return m.Str("last_errors").Map(1).Uint(7) }
	valid := func(m *mp) *mp { return m.Str("time").Int(1).Str("node_id").Uint(1).Str("message").Str("m") }
	cases := []struct {
		name  string
		body  []byte
		kind  Kind
		field string
	}{
		{"empty body", nil, KindEmpty, ""},
		{"not a map", newMP().Array(0).Bytes(), KindBadType, ""},
		{"trailing bytes", append(statsBody(0).Bytes(), 0xc0), KindTrailingBytes, ""},
		{"a field twice", statsBody(2).Str("processed_rows").Map(0).Str("processed_rows").Map(0).Bytes(), KindDuplicateField, "processed_rows"},
		{"processed_rows not a map", statsBody(1).Str("processed_rows").Array(0).Bytes(), KindBadType, "processed_rows"},
		{"negative processed rows", statsBody(1).Str("processed_rows").Map(1).Uint(7).Int(-1).Bytes(), KindOutOfRange, "processed_rows[7]"},
		{"float processed rows", statsBody(1).Str("processed_rows").Map(1).Uint(7).F64(1).Bytes(), KindBadType, "processed_rows[7]"},
		{"a flow twice in processed_rows", statsBody(1).Str("processed_rows").Map(2).Uint(7).Uint(1).Str("7").Uint(2).Bytes(), KindDuplicateFlow, "processed_rows[7]"},
		{"a flow twice in last_errors", statsBody(1).Str("last_errors").Map(2).Uint(7).Array(0).Uint(7).Array(0).Bytes(), KindDuplicateFlow, "last_errors[7]"},
		{"a flow id with a leading zero", statsBody(1).Str("last_errors").Map(1).Str("07").Array(0).Bytes(), KindBadFlowID, `last_errors["07"]`},
		{"a flow id past uint32", statsBody(1).Str("processed_rows").Map(1).Uint(math.MaxUint32 + 1).Uint(1).Bytes(), KindBadFlowID, "processed_rows[4294967296]"},
		{"errors not an array", errs(statsBody(1)).Map(0).Bytes(), KindBadType, "last_errors[7]"},
		{"four errors", errs(statsBody(1)).Array(4).statsErr(1, 1, "a").statsErr(1, 1, "a").statsErr(1, 1, "a").statsErr(1, 1, "a").Bytes(), KindBadError, "last_errors[7]"},
		{"an error without node_id", errs(statsBody(1)).Array(1).Map(2).Str("time").Int(1).Str("message").Str("m").Bytes(), KindBadError, "last_errors[7][0]"},
		{"an error without time", errs(statsBody(1)).Array(1).Map(2).Str("node_id").Uint(1).Str("message").Str("m").Bytes(), KindBadError, "last_errors[7][0]"},
		{"an error without message", errs(statsBody(1)).Array(2).statsErr(1, 1, "a").Map(2).Str("time").Int(1).Str("node_id").Uint(1).Bytes(), KindBadError, "last_errors[7][1]"},
		{"a negative node_id", errs(statsBody(1)).Array(1).Map(3).Str("time").Int(1).Str("node_id").Int(-1).Str("message").Str("m").Bytes(), KindOutOfRange, "last_errors[7][0].node_id"},
		{"a node_id string", errs(statsBody(1)).Array(1).Map(3).Str("time").Int(1).Str("node_id").Str("1").Str("message").Str("m").Bytes(), KindBadType, "last_errors[7][0].node_id"},
		{"node_id twice", valid(errs(statsBody(1)).Array(1).Map(4)).Str("node_id").Uint(2).Bytes(), KindDuplicateField, "last_errors[7][0].node_id"},
		{"a time past int64", errs(statsBody(1)).Array(1).Map(3).Str("time").U64(1 << 63).Str("node_id").Uint(1).Str("message").Str("m").Bytes(), KindOutOfRange, "last_errors[7][0].time"},
		{"an empty message", errs(statsBody(1)).Array(1).statsErr(1, 1, "").Bytes(), KindBadError, "last_errors[7][0].message"},
		{"a message of 1025 bytes", errs(statsBody(1)).Array(1).statsErr(1, 1, strings.Repeat("x", 1025)).Bytes(), KindBadError, "last_errors[7][0].message"},
		{"a message not UTF-8", errs(statsBody(1)).Array(1).statsErr(1, 1, "a\xff").Bytes(), KindBadError, "last_errors[7][0].message"},
		{"truncated", errs(statsBody(1)).Array(1).Bytes(), KindNotMsgpack, "last_errors[7][0]"},
		{"a negative state size", statsBody(1).Str("state_size").Map(1).Uint(1).Int(-1).Bytes(), KindOutOfRange, "state_size[1]"},
	}
	for _, tc := range cases {
		_, err := DecodeStats(tc.body)
		require.ErrorIs(t, err, ErrInvalidStats, tc.name)
		assert.NotErrorIs(t, err, ErrInvalidReport, tc.name)
		var de *DecodeError
		require.ErrorAs(t, err, &de, tc.name)
		assert.Equal(t, tc.kind, de.Kind, "%s: %v", tc.name, err)
		assert.Equal(t, tc.field, de.Field, "%s: %v", tc.name, err)
	}
}

// TestDecodeStatsReadsWhatAppendStatsWrites round-trips random views: the
// health of random nodes merged as the worker merges it.
func TestDecodeStatsReadsWhatAppendStatsWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 7))
	for round := range 200 {
		flows := randomFlows(rng, rng.IntN(40), 1<<uint(6+rng.IntN(26))) // n <= maxID
		var nodes []flowstate.NodeHealth
		for n := range rng.IntN(5) {
			h := &flowstate.Health{HasProcessedRows: true, HasLastErrors: true}
			for id := range uint32(rng.IntN(30)) {
				fh := flowstate.FlowHealth{ID: flowstate.FlowID(id * uint32(1+rng.IntN(1000))), Has: flowstate.HealthFields(1 + rng.IntN(3))}
				if len(h.Flows) > 0 && h.Flows[len(h.Flows)-1].ID >= fh.ID {
					continue
				}
				fh.ProcessedRows = rng.Uint64() >> rng.IntN(65)
				if fh.Has&flowstate.HasLastErrors != 0 {
					for k := range rng.IntN(flowstate.MaxFlowErrors + 1) {
						fh.LastErrors = append(fh.LastErrors, flowstate.FlowError{Time: int64(rng.Uint64()) >> rng.IntN(65), Message: strings.Repeat("é\"<\u2028", 1+k)})
					}
				}
				h.Flows = append(h.Flows, fh)
			}
			nodes = append(nodes, flowstate.NodeHealth{NodeID: rng.Uint64() >> rng.IntN(65) >> uint(n), Health: h})
		}
		stats := flowstate.MergeHealth(nil, nodes)
		v, err := DecodeStats(AppendStats(nil, flows, stats))
		require.NoError(t, err, "round %d", round)
		assert.Equal(t, normalFlows(flows), normalFlows(v.Flows), "round %d", round)
		assert.Equal(t, normalStats(stats), normalStats(v.Stats), "round %d", round)
		assert.Equal(t, string(flowstate.AppendStatsJSON(nil, flows, stats)), string(v.AppendJSON(nil)), "round %d", round)
	}
}
