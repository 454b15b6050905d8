package codec

import (
	"encoding/hex"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// mustHex decodes hex written with spaces.
func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

const (
	hexStateSize = "aa 73746174655f73697a65"                 // "state_size"
	hexLastExec  = "b2 6c6173745f657865635f74696d655f6d6170" // "last_exec_time_map"
	hexStartTime = "ae 73746172745f74696d655f6d6170"         // "start_time_map"
)

func TestAppendAggregateWritesTheDocumentedBytes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flows []flowstate.Flow
		want  string
	}{
		{"nothing gives three empty maps", nil,
			"83 " + hexStateSize + " 80 " + hexLastExec + " 80 " + hexStartTime + " 80"},
		{"GreptimeDB's example", []flowstate.Flow{
			{ID: 1, Has: hasSize | hasLast, StateSize: 1024, LastExecTime: 1_700_000_000_000},
			sizeFlow(2, 2048),
		}, "83 " + hexStateSize + " 82 01 cd0400 02 cd0800 " +
			hexLastExec + " 81 01 cf0000018bcfe56800 " + hexStartTime + " 80"},
		{"a flow with no field contributes nothing", []flowstate.Flow{{ID: 5}, startFlow(300, -1)},
			"83 " + hexStateSize + " 80 " + hexLastExec + " 80 " + hexStartTime + " 81 cd012c ff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, mustHex(tc.want), AppendAggregate(nil, tc.flows))
		})
	}
}

func TestIntegersTakeTheirShortestForm(t *testing.T) {
	for _, tc := range []struct {
		v    int64
		want string
	}{
		{0, "00"}, {127, "7f"}, {128, "cc80"}, {255, "ccff"}, {256, "cd0100"}, {65535, "cdffff"},
		{65536, "ce00010000"}, {math.MaxUint32, "ceffffffff"}, {math.MaxUint32 + 1, "cf0000000100000000"},
		{math.MaxInt64, "cf7fffffffffffffff"},
		{-1, "ff"}, {-32, "e0"}, {-33, "d0df"}, {-128, "d080"}, {-129, "d1ff7f"}, {-32768, "d18000"},
		{-32769, "d2ffff7fff"}, {math.MinInt32, "d280000000"}, {math.MinInt32 - 1, "d3ffffffff7fffffff"},
		{math.MinInt64, "d38000000000000000"},
	} {
		assert.Equal(t, mustHex(tc.want), appendInt(nil, tc.v), "%d", tc.v)
		if tc.v >= 0 {
			assert.Equal(t, mustHex(tc.want), appendUint(nil, uint64(tc.v)), "%d", tc.v)
		}
	}
	assert.Equal(t, mustHex("cfffffffffffffffff"), appendUint(nil, math.MaxUint64))
}

func TestMapHeadersTakeTheirShortestForm(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "80"}, {15, "8f"}, {16, "de0010"}, {65535, "deffff"}, {65536, "df00010000"}} {
		assert.Equal(t, mustHex(tc.want), appendMapLen(nil, tc.n), "%d", tc.n)
	}
}

func TestAppendAggregateIsDeterministic(t *testing.T) {
	flows := boundaryFlows()
	want := AppendAggregate(nil, flows)
	for range 20 {
		// Maps filled in a different order each time give the same bytes.
		assert.Equal(t, want, AppendAggregate(nil, flowstate.ValueOf(flows).Flows()))
	}
	// So does the same state received in another shape.
	body := libraryMarshal(t, wireOf(1, flowstate.ValueOf(flows)), false)
	var d Decoder
	r, err := decodeReport(t, &d, body)
	require.NoError(t, err)
	assert.Equal(t, want, AppendAggregate(nil, r.Flows))
}

func TestAppendAggregateAppendsWithoutAllocating(t *testing.T) {
	flows := fullFlows(1000)
	dst := AppendAggregate([]byte("prefix"), flows)
	assert.Equal(t, "prefix", string(dst[:6]))
	assert.Equal(t, AppendAggregate(nil, flows), dst[6:])
	allocs := testing.AllocsPerRun(100, func() { dst = AppendAggregate(dst[:0], flows) })
	assert.Zero(t, allocs)
}

func TestDecodeAggregateRoundTrips(t *testing.T) {
	for i, flows := range testStates() {
		v, err := DecodeAggregate(AppendAggregate(nil, flows))
		require.NoError(t, err)
		assert.True(t, flowstate.ValueOf(flows).Equal(v), "state %d", i)
		assert.NotNil(t, v.StateSize)
		assert.NotNil(t, v.LastExecTimeMap)
		assert.NotNil(t, v.StartTimeMap)
	}
}

func TestDecodeAggregateAcceptsOtherEncoders(t *testing.T) {
	flows := boundaryFlows()
	want := flowstate.ValueOf(flows)
	body := libraryMarshal(t, map[string]any{
		"start_time_map":     stringKeyed(want.StartTimeMap),
		"state_size":         stringKeyed(want.StateSize),
		"last_exec_time_map": nil,
		"node_id":            "not a report field here",
	}, false)
	got, err := DecodeAggregate(body)
	require.NoError(t, err)
	want.LastExecTimeMap = nil
	assert.True(t, want.Equal(got))
}

func TestDecodeAggregateRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  []byte
		field string
		kind  Kind
	}{
		{"empty body", nil, "", KindEmpty},
		{"trailing bytes", append(AppendAggregate(nil, nil), 0), "", KindTrailingBytes},
		{"negative size", newMP().Map(1).Str("state_size").Map(1).Uint(1).Int(-5).Bytes(), "state_size[1]", KindOutOfRange},
		{"same flow twice", newMP().Map(1).Str("start_time_map").Map(2).Uint(1).Int(1).Str("1").Int(1).Bytes(), "start_time_map[1]", KindDuplicateFlow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeAggregate(tc.body)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			assert.Equal(t, tc.field, de.Field)
			assert.Equal(t, tc.kind, de.Kind)
			assert.ErrorIs(t, err, ErrInvalidAggregate)
			assert.NotErrorIs(t, err, ErrInvalidReport)
		})
	}
}
