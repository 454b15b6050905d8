package codec

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// errMap writes an error map {time, message}.
func (m *mp) errMap(time int64, msg string) *mp {
	return m.Map(2).Str("time").Int(time).Str("message").Str(msg)
}

func TestDecodeReadsV3Fields(t *testing.T) {
	body := node(4).
		Str("processed_rows").Map(2).Uint(9).Uint(100).Str("3").Uint(52000).
		Str("last_errors").Map(2).Uint(3).Array(2).errMap(20, "new").errMap(10, "old").
		Uint(4).Array(0).
		Str("seq").Uint(41).Bytes()
	var d Decoder
	r, err := decodeReport(t, &d, body)
	require.NoError(t, err)
	assert.Empty(t, r.Flows, "health flows are not seed flows")
	h := r.Health
	assert.True(t, h.HasProcessedRows)
	assert.True(t, h.HasLastErrors)
	assert.True(t, h.HasSeq)
	assert.Equal(t, uint64(41), h.Seq)
	assert.Equal(t, []flowstate.FlowHealth{
		{ID: 3, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 52000,
			LastErrors: []flowstate.FlowError{{Time: 20, Message: "new"}, {Time: 10, Message: "old"}}},
		{ID: 4, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{}},
		{ID: 9, Has: flowstate.HasProcessedRows, ProcessedRows: 100},
	}, h.Flows)
	assert.Empty(t, h.Check())
}

func TestDecodeTakesNilV3FieldsAsAbsent(t *testing.T) {
	body := node(4).Str("processed_rows").Nil().Str("last_errors").Nil().Str("seq").Nil().Bytes()
	var d Decoder
	r, err := decodeReport(t, &d, body)
	require.NoError(t, err)
	assert.False(t, r.Health.IsV3())
}

func TestDecodeIgnoresUnknownKeysOfAnError(t *testing.T) {
	body := node(2).Str("last_errors").Map(1).Uint(1).Array(1).
		Map(3).Str("code").Array(1).Map(1).Str("x").F64(1).Str("message").Str("m").Str("time").Int(-5).Bytes()
	var d Decoder
	r, err := decodeReport(t, &d, body)
	require.NoError(t, err)
	assert.Equal(t, []flowstate.FlowError{{Time: -5, Message: "m"}}, r.Health.Flows[0].LastErrors)
}

func TestDecodeRejectsBrokenV3Fields(t *testing.T) {
	errs := func(build func(m *mp) *mp) []byte {
		return build(node(2).Str("last_errors").Map(1).Uint(7)).Bytes()
	}
	tests := []struct {
		name  string
		body  []byte
		kind  Kind
		field string
	}{
		{"more than 3 errors", errs(func(m *mp) *mp {
			return m.Array(4).errMap(1, "a").errMap(1, "a").errMap(1, "a").errMap(1, "a")
		}), KindBadError, "last_errors[7]"},
		{"error without time", errs(func(m *mp) *mp { return m.Array(1).Map(1).Str("message").Str("a") }), KindBadError, "last_errors[7][0]"},
		{"error without message", errs(func(m *mp) *mp { return m.Array(1).Map(1).Str("time").Int(1) }), KindBadError, "last_errors[7][0]"},
		{"empty message", errs(func(m *mp) *mp { return m.Array(1).errMap(1, "") }), KindBadError, "last_errors[7][0].message"},
		{"message over 1024 bytes", errs(func(m *mp) *mp { return m.Array(1).errMap(1, strings.Repeat("é", 513)) }), KindBadError, "last_errors[7][0].message"},
		{"message not UTF-8", errs(func(m *mp) *mp { return m.Array(1).errMap(1, "a\xffb") }), KindBadError, "last_errors[7][0].message"},
		{"time outside int64", errs(func(m *mp) *mp {
			return m.Array(1).Map(2).Str("time").U64(1 << 63).Str("message").Str("a")
		}), KindOutOfRange, "last_errors[7][0].time"},
		{"time a float", errs(func(m *mp) *mp {
			return m.Array(1).Map(2).Str("time").F64(1).Str("message").Str("a")
		}), KindBadType, "last_errors[7][0].time"},
		{"message not a string", errs(func(m *mp) *mp {
			return m.Array(1).Map(2).Str("time").Int(1).Str("message").Bin([]byte("a"))
		}), KindBadType, "last_errors[7][0].message"},
		{"time named twice", errs(func(m *mp) *mp {
			return m.Array(1).Map(3).Str("time").Int(1).Str("time").Int(1).Str("message").Str("a")
		}), KindDuplicateField, "last_errors[7][0].time"},
		{"errors not an array", errs(func(m *mp) *mp { return m.errMap(1, "a") }), KindBadType, "last_errors[7]"},
		{"negative processed rows", node(2).Str("processed_rows").Map(1).Uint(7).Int(-1).Bytes(), KindOutOfRange, "processed_rows[7]"},
		{"processed rows a string", node(2).Str("processed_rows").Map(1).Uint(7).Str("1").Bytes(), KindBadType, "processed_rows[7]"},
		{"flow named twice", node(2).Str("processed_rows").Map(2).Uint(7).Uint(1).Str("7").Uint(2).Bytes(), KindDuplicateFlow, "processed_rows[7]"},
		{"flow id not canonical", node(2).Str("last_errors").Map(1).Str("07").Array(0).Bytes(), KindBadFlowID, `last_errors["07"]`},
		{"flow id past uint32", node(2).Str("processed_rows").Map(1).Uint(1 << 32).Uint(1).Bytes(), KindBadFlowID, "processed_rows[4294967296]"},
		{"negative seq", node(2).Str("seq").Int(-1).Bytes(), KindOutOfRange, "seq"},
		{"seq named twice", node(3).Str("seq").Uint(1).Str("seq").Uint(2).Bytes(), KindDuplicateField, "seq"},
		{"last_errors named twice", node(3).Str("last_errors").Nil().Str("last_errors").Nil().Bytes(), KindDuplicateField, "last_errors"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Decoder
			r := Report{Health: flowstate.Health{HasSeq: true}}
			err := d.Decode(tt.body, &r)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.ErrorIs(t, err, ErrInvalidReport)
			assert.Equal(t, tt.kind, de.Kind, de.Error())
			assert.Equal(t, tt.field, de.Field, "the reason names the flow")
			assert.False(t, r.Health.IsV3(), "a rejected report leaves r empty")
		})
	}
}

func TestDecodeCountsHealthFlowsTowardMaxFlows(t *testing.T) {
	seed := node(3).Str("state_size").Map(2).Uint(1).Uint(1).Uint(2).Uint(1)
	tests := []struct {
		name    string
		body    []byte
		wantErr string
	}{
		{"processed_rows adds a flow", seed.Str("processed_rows").Map(1).Uint(3).Uint(1).Bytes(), "processed_rows[3]"},
		{"last_errors adds a flow", node(3).Str("state_size").Map(2).Uint(1).Uint(1).Uint(2).Uint(1).
			Str("last_errors").Map(1).Uint(3).Array(1).errMap(1, "e").Bytes(), "last_errors[3]"},
		{"an empty error array names no flow", node(3).Str("state_size").Map(2).Uint(1).Uint(1).Uint(2).Uint(1).
			Str("last_errors").Map(1).Uint(3).Array(0).Bytes(), ""},
		{"flows of the seed maps are not counted twice", node(3).Str("state_size").Map(2).Uint(1).Uint(1).Uint(2).Uint(1).
			Str("processed_rows").Map(2).Uint(1).Uint(1).Uint(2).Uint(9).Bytes(), ""},
		{"a health map alone over the limit", node(2).Str("processed_rows").Map(3).Uint(1).Uint(1).Uint(2).Uint(1).Uint(3).Uint(1).Bytes(), "processed_rows"},
		{"two health maps over the limit together", node(3).Str("processed_rows").Map(2).Uint(1).Uint(1).Uint(2).Uint(1).
			Str("last_errors").Map(1).Uint(3).Array(1).errMap(1, "e").Bytes(), "last_errors[3]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decoder{MaxFlows: 2}
			_, err := decodeReport(t, &d, tt.body)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			assert.Equal(t, KindTooManyFlows, de.Kind)
			assert.Equal(t, tt.wantErr, de.Field)
		})
	}
}

func v3Report() *Report {
	return &Report{
		NodeID: 7, NodeEpoch: 1700000000000, HasNodeEpoch: true,
		Flows: []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 1024}},
		Health: flowstate.Health{
			HasProcessedRows: true, HasLastErrors: true, HasSeq: true, Seq: 41,
			Flows: []flowstate.FlowHealth{
				{ID: 1, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 52000,
					LastErrors: []flowstate.FlowError{{Time: 1700000000000, Message: "sink table missing"}}},
				{ID: 300, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{
					{Time: 2, Message: strings.Repeat("x", 40)}, {Time: 1, Message: strings.Repeat("y", 300)}}},
			},
		},
	}
}

func TestAppendReportRoundTripsV3Fields(t *testing.T) {
	want := v3Report()
	var d Decoder
	got, err := decodeReport(t, &d, AppendReport(nil, want))
	require.NoError(t, err)
	assert.Equal(t, want.Flows, got.Flows)
	assert.Equal(t, want.Health, got.Health)
	assert.Equal(t, want.NodeEpoch, got.NodeEpoch)
}

func TestDecodeV3DoesNotAllocateInSteadyState(t *testing.T) {
	body := AppendReport(nil, v3Report())
	var d Decoder
	var r Report
	require.NoError(t, d.Decode(body, &r))
	allocs := testing.AllocsPerRun(100, func() {
		if err := d.Decode(body, &r); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "repeated messages reuse their strings")
}

// TestDecodeTellsApartMessagesOfOneCacheSlot: two messages of one length
// whose first, middle and last bytes agree share a slot of the Decoder's
// cache of recent messages; each report still reads its own.
func TestDecodeTellsApartMessagesOfOneCacheSlot(t *testing.T) {
	first, second := "abcdcba", "abzdzba"
	require.Equal(t, recentSlot([]byte(first)), recentSlot([]byte(second)))
	report := func(msg string) *Report {
		r := v3Report()
		r.Health.Flows[0].LastErrors[0].Message = msg
		return r
	}
	var d Decoder
	for _, msg := range []string{first, second, first, second} {
		got, err := decodeReport(t, &d, AppendReport(nil, report(msg)))
		require.NoError(t, err)
		assert.Equal(t, msg, got.Health.Flows[0].LastErrors[0].Message)
	}
}

func TestDecodeTakesAMessageOfExactly1024Bytes(t *testing.T) {
	msg := strings.Repeat("é", 511) + "xx"
	require.Len(t, msg, flowstate.MaxErrorMessage)
	var d Decoder
	r, err := decodeReport(t, &d, node(2).Str("last_errors").Map(1).Uint(1).Array(1).errMap(1, msg).Bytes())
	require.NoError(t, err)
	assert.Equal(t, msg, r.Health.Flows[0].LastErrors[0].Message)
}

func TestAppendStatsMatchesTheJSONView(t *testing.T) {
	flows := []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 1024, LastExecTime: 1700000000000}}
	stats := []flowstate.FlowStats{{ID: 1, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 52000,
		LastErrors: []flowstate.StatsError{{Time: 1700000000000, NodeID: 7, Message: "sink table missing"}}}}
	got := AppendStats(nil, flows, stats)
	want := newMP().Map(5).
		Str("state_size").Map(1).Uint(1).Uint(1024).
		Str("last_exec_time_map").Map(1).Uint(1).Int(1700000000000).
		Str("start_time_map").Map(0).
		Str("processed_rows").Map(1).Uint(1).Uint(52000).
		Str("last_errors").Map(1).Uint(1).Array(1).
		Map(3).Str("time").Int(1700000000000).Str("node_id").Uint(7).Str("message").Str("sink table missing").Bytes()
	assert.Equal(t, want, got)
	assert.Equal(t, len(got), StatsLen(flows, stats))
	assert.Equal(t, AppendAggregate(nil, nil)[1:], AppendStats(nil, nil, nil)[1:1+len(AppendAggregate(nil, nil))-1], "the seed's maps come first")
}

func statsFixture(n int) ([]flowstate.Flow, []flowstate.FlowStats) {
	flows := fullFlows(n)
	var stats []flowstate.FlowStats
	for i := 0; i < n; i += 2 {
		s := flowstate.FlowStats{ID: flowstate.FlowID(i*3 + 1), Has: flowstate.HasProcessedRows, ProcessedRows: uint64(i) << 20}
		if i%4 == 0 {
			s.Has |= flowstate.HasLastErrors
			s.LastErrors = []flowstate.StatsError{{Time: int64(i), NodeID: uint64(i), Message: strings.Repeat("e", i%300+1)}}
		}
		stats = append(stats, s)
	}
	return flows, stats
}

func TestSplitStatsChunksFitAndCoverTheView(t *testing.T) {
	flows, stats := statsFixture(500)
	for _, budget := range []int{600, 4096, 1 << 20} {
		ends, err := SplitStats(nil, flows, stats, budget)
		require.NoError(t, err)
		var prev StatsChunk
		var gotFlows []flowstate.Flow
		var gotStats []flowstate.FlowStats
		lastID := int64(-1)
		for _, e := range ends {
			cf, cs := flows[prev.Flows:e.Flows], stats[prev.Stats:e.Stats]
			assert.LessOrEqual(t, len(AppendStats(nil, cf, cs)), budget)
			assert.Equal(t, len(AppendStats(nil, cf, cs)), StatsLen(cf, cs))
			for _, f := range cf {
				assert.Greater(t, int64(f.ID), lastID, "ranges ascend and do not overlap")
			}
			for _, s := range cs {
				assert.Greater(t, int64(s.ID), lastID, "ranges ascend and do not overlap")
			}
			if len(cf) > 0 {
				lastID = max(lastID, int64(cf[len(cf)-1].ID))
			}
			if len(cs) > 0 {
				lastID = max(lastID, int64(cs[len(cs)-1].ID))
			}
			gotFlows, gotStats = append(gotFlows, cf...), append(gotStats, cs...)
			prev = e
		}
		assert.Equal(t, flows, gotFlows)
		assert.Equal(t, stats, gotStats)
		if budget == 1<<20 {
			assert.Len(t, ends, 1)
		}
	}
	ends, err := SplitStats(nil, nil, nil, 1000)
	require.NoError(t, err)
	assert.Equal(t, []StatsChunk{{}}, ends, "an empty view is one empty chunk")
	_, err = SplitStats(nil, flows, stats, 80)
	require.ErrorIs(t, err, ErrChunkBudget)
}
