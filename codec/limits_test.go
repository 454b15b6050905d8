package codec

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nested returns a report whose unknown field "x" holds depth-1 nested
// containers, so that the body's nesting depth is depth.
func nested(depth int, maps bool) []byte {
	m := node(2).Str("x")
	for range depth - 2 {
		if maps {
			m.Map(1).Str("k")
		} else {
			m.Array(1)
		}
	}
	if maps {
		return m.Map(0).Bytes()
	}
	return m.Array(0).Bytes()
}

func TestDecodeNestingDepth(t *testing.T) {
	for _, maps := range []bool{false, true} {
		var d Decoder
		_, err := decodeReport(t, &d, nested(MaxDepth, maps))
		require.NoError(t, err, "depth 32 is accepted (maps: %v)", maps)

		_, err = decodeReport(t, &d, nested(MaxDepth+1, maps))
		var de *DecodeError
		require.ErrorAs(t, err, &de, "depth 33 is rejected (maps: %v)", maps)
		assert.Equal(t, KindTooDeep, de.Kind)
		assert.Equal(t, "x", de.Field)
	}

	// 100,000 levels are rejected without recursing through them.
	body := append(node(2).Str("x").Bytes(), strings.Repeat("\x91", 100_000)...)
	var d Decoder
	_, err := decodeReport(t, &d, append(body, 0))
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, KindTooDeep, de.Kind)
}

func TestDecodeRejectsHugeHeadersWithoutAllocating(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"report map of 2^31 fields", []byte{codeMap32, 0x80, 0, 0, 0}},
		{"report map of 2^32-1 fields", []byte{codeMap32, 0xff, 0xff, 0xff, 0xff}},
		{"state_size of 2^31 flows", node(2).Str("state_size").Raw(codeMap32, 0x80, 0, 0, 0).Bytes()},
		{"state_size of 2^31 flows, one given", node(2).Str("state_size").Raw(codeMap32, 0x80, 0, 0, 0).Uint(1).Uint(1).Bytes()},
		{"unknown array of 2^31 items", node(2).Str("x").Raw(codeArray32, 0x80, 0, 0, 0).Bytes()},
		{"unknown map of 2^31 entries", node(2).Str("x").Raw(codeMap32, 0x80, 0, 0, 0).Bytes()},
		{"unknown string of 2^31 bytes", node(2).Str("x").Raw(codeStr32, 0x80, 0, 0, 0).Bytes()},
		{"unknown binary of 2^31 bytes", node(2).Str("x").Raw(codeBin32, 0x80, 0, 0, 0).Bytes()},
		{"unknown extension of 2^31 bytes", node(2).Str("x").Raw(codeExt32, 0x80, 0, 0, 0, 1).Bytes()},
		{"field name of 2^31 bytes", newMP().Map(1).Raw(codeStr32, 0x80, 0, 0, 0).Bytes()},
		{"flow id string of 2^31 bytes", node(2).Str("state_size").Map(1).Raw(codeStr32, 0x80, 0, 0, 0).Bytes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Decoder
			var r Report
			err := d.Decode(tc.body, &r)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			assert.Equal(t, KindNotMsgpack, de.Kind)
			allocs := testing.AllocsPerRun(100, func() { _ = d.Decode(tc.body, &r) })
			assert.LessOrEqual(t, allocs, 3.0, "only the error is allocated")
			assert.Less(t, cap(d.ents), 16, "nothing sized by the header")
			assert.Less(t, cap(r.Flows), 16, "nothing sized by the header")
		})
	}
}

func TestDecodeMaxFlows(t *testing.T) {
	three := node(4).
		Str("state_size").Map(2).Uint(1).Uint(1).Uint(2).Uint(2).
		Str("last_exec_time_map").Map(2).Uint(2).Int(2).Uint(3).Int(3).
		Str("start_time_map").Map(3).Uint(3).Int(3).Uint(1).Int(1).Uint(2).Int(2).Bytes()
	d := Decoder{MaxFlows: 3}
	r, err := decodeReport(t, &d, three)
	require.NoError(t, err, "three distinct flows across three maps are within a limit of 3")
	assert.Len(t, r.Flows, 3)

	d.MaxFlows = 2
	_, err = decodeReport(t, &d, three)
	var de *DecodeError
	require.ErrorAs(t, err, &de, "three distinct flows are over a limit of 2")
	assert.Equal(t, KindTooManyFlows, de.Kind)
	assert.Equal(t, "last_exec_time_map[3]", de.Field, "named at the first flow over the limit")

	for _, tc := range []struct {
		name  string
		limit int
		body  []byte
		field string
	}{
		{"a map that claims more flows than the limit, before its entries are read", 2,
			node(2).Str("state_size").Raw(codeMap32, 0, 0, 0, 3).Bytes(), "state_size"},
		{"the first flow over the limit, before the rest of the map is read", 3,
			node(3).Str("state_size").Map(3).Uint(1).Uint(1).Uint(2).Uint(2).Uint(3).Uint(3).
				Str("start_time_map").Map(3).Uint(2).Int(1).Uint(9).Int(1).Raw(codeUint64).Bytes(), "start_time_map[9]"},
		{"the first flow over the limit, before the next map is read", 2,
			node(4).Str("state_size").Map(2).Uint(1).Uint(1).Uint(2).Uint(2).
				Str("last_exec_time_map").Map(1).Uint(3).Int(1).
				Str("start_time_map").Raw(codeMap32, 0xff).Bytes(), "last_exec_time_map[3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decoder{MaxFlows: tc.limit}
			_, err := decodeReport(t, &d, tc.body)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			assert.Equal(t, KindTooManyFlows, de.Kind)
			assert.Equal(t, tc.field, de.Field)
		})
	}

	// At the limit: 1000 flows in each of the three maps.
	body := AppendReport(nil, &Report{NodeID: 1, Flows: fullFlows(1000)})
	d.MaxFlows = 1000
	r, err = decodeReport(t, &d, body)
	require.NoError(t, err)
	assert.Len(t, r.Flows, 1000)
	d.MaxFlows = 999
	_, err = decodeReport(t, &d, body)
	require.ErrorAs(t, err, &de)
	assert.Equal(t, KindTooManyFlows, de.Kind)
}
