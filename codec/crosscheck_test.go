package codec

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/flowstate-io/flowstate/flowstate"
)

// These tests hold the codec against msgpack/v5's reflection encoder and
// decoder: what the library writes, Decode reads the same; what the codec
// writes, the library reads the same and would write byte for byte.

// boundaryFlows has values at the edge of every msgpack integer form.
func boundaryFlows() []flowstate.Flow {
	sizes := []uint64{0, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64}
	times := []int64{0, 127, 128, -1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1,
		math.MaxInt32, math.MaxInt32 + 1, math.MaxInt64, math.MinInt64, 1_700_000_000_000}
	ids := []uint32{0, 127, 128, 255, 256, 65535, 65536, math.MaxUint32}
	var flows []flowstate.Flow
	for i := range max(len(sizes), len(times), len(ids)) {
		flows = append(flows, flowstate.Flow{
			ID:           flowstate.FlowID(ids[i%len(ids)] ^ uint32(i<<20)),
			Has:          hasAll,
			StateSize:    sizes[i%len(sizes)],
			LastExecTime: times[i%len(times)],
			StartTime:    times[(i+5)%len(times)],
		})
	}
	return sortFlows(flows)
}

// testStates returns boundary values and random states of many sizes and
// id ranges.
func testStates() [][]flowstate.Flow {
	rng := rand.New(rand.NewPCG(7, 11))
	states := [][]flowstate.Flow{nil, boundaryFlows(), fullFlows(20)}
	for _, n := range []int{1, 2, 15, 16, 17, 100, 1000} {
		for _, maxID := range []uint32{uint32(n), 1000, 1 << 16, math.MaxUint32} {
			if int(maxID) >= n {
				states = append(states, randomFlows(rng, n, maxID))
			}
		}
	}
	return states
}

func stringKeyed[V any](m map[flowstate.FlowID]V) map[string]V {
	out := make(map[string]V, len(m))
	for id, v := range m {
		out[strconv.FormatUint(uint64(id), 10)] = v
	}
	return out
}

type wireInt64Keys struct {
	NodeID          uint64           `msgpack:"node_id"`
	NodeEpoch       *uint64          `msgpack:"node_epoch"`
	StateSize       map[int64]uint64 `msgpack:"state_size"`
	LastExecTimeMap map[int64]int64  `msgpack:"last_exec_time_map"`
	StartTimeMap    map[int64]int64  `msgpack:"start_time_map"`
	Extra           []any            `msgpack:"extra"`
}

func int64Keyed[V any](m map[flowstate.FlowID]V) map[int64]V {
	out := make(map[int64]V, len(m))
	for id, v := range m {
		out[int64(id)] = v
	}
	return out
}

func TestDecodeAgreesWithLibraryEncoder(t *testing.T) {
	epoch := uint64(1_700_000_000_000)
	for i, flows := range testStates() {
		v := flowstate.ValueOf(flows)
		shapes := []struct {
			name    string
			value   any
			compact bool
		}{
			{"uint32 keys, fixed-width ints", wireOf(42, v), false},
			{"uint32 keys, compact ints", wireOf(42, v), true},
			{"string keys, compact ints", map[string]any{
				"node_id":            uint64(42),
				"state_size":         stringKeyed(v.StateSize),
				"last_exec_time_map": stringKeyed(v.LastExecTimeMap),
				"start_time_map":     stringKeyed(v.StartTimeMap),
			}, true},
			{"string keys, fixed-width ints", map[string]any{
				"start_time_map":     stringKeyed(v.StartTimeMap),
				"node_id":            uint64(42),
				"last_exec_time_map": stringKeyed(v.LastExecTimeMap),
				"state_size":         stringKeyed(v.StateSize),
				"future":             map[string]any{"a": []any{1.5, "x", nil, true, []byte{1}}},
			}, false},
			{"int64 keys, node_epoch and an unknown field", wireInt64Keys{
				NodeID: 42, NodeEpoch: &epoch,
				StateSize: int64Keyed(v.StateSize), LastExecTimeMap: int64Keyed(v.LastExecTimeMap), StartTimeMap: int64Keyed(v.StartTimeMap),
				Extra: []any{map[string]any{"nested": []any{int8(-1), uint16(9)}}},
			}, false},
		}
		for _, shape := range shapes {
			body := libraryMarshal(t, shape.value, shape.compact)
			var d Decoder
			r, err := decodeReport(t, &d, body)
			require.NoError(t, err, "state %d, %s", i, shape.name)
			assert.Equal(t, uint64(42), r.NodeID)
			assert.Equal(t, normal(Report{Flows: flows}).Flows, normal(r).Flows, "state %d, %s", i, shape.name)
		}
	}
}

func TestLibraryReadsWhatTheCodecWrites(t *testing.T) {
	for i, flows := range testStates() {
		v := flowstate.ValueOf(flows)

		var agg wireStruct
		require.NoError(t, msgpack.Unmarshal(AppendAggregate(nil, flows), &agg))
		want := wireOf(0, v)
		assert.Equal(t, want, agg, "aggregate of state %d", i)

		var rep wireInt64Keys
		require.NoError(t, msgpack.Unmarshal(AppendReport(nil, &Report{NodeID: 42, NodeEpoch: 7, HasNodeEpoch: true, Flows: flows}), &rep))
		assert.Equal(t, uint64(42), rep.NodeID)
		require.NotNil(t, rep.NodeEpoch)
		assert.Equal(t, uint64(7), *rep.NodeEpoch)
		assert.Equal(t, int64Keyed(v.StateSize), rep.StateSize, "report of state %d", i)
		assert.Equal(t, int64Keyed(v.LastExecTimeMap), rep.LastExecTimeMap)
		assert.Equal(t, int64Keyed(v.StartTimeMap), rep.StartTimeMap)
	}
}

// libraryAggregate writes the aggregate with msgpack/v5's own shortest
// integer encoding (EncodeUint, EncodeInt).
func libraryAggregate(flows []flowstate.Flow) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	must(enc.EncodeMapLen(3))
	for _, m := range []struct {
		name string
		bit  flowstate.Fields
	}{{"state_size", hasSize}, {"last_exec_time_map", hasLast}, {"start_time_map", hasStart}} {
		n := 0
		for _, f := range flows {
			if f.Has&m.bit != 0 {
				n++
			}
		}
		must(enc.EncodeString(m.name))
		must(enc.EncodeMapLen(n))
		for _, f := range flows {
			if f.Has&m.bit == 0 {
				continue
			}
			must(enc.EncodeUint(uint64(f.ID)))
			switch m.bit {
			case hasSize:
				must(enc.EncodeUint(f.StateSize))
			case hasLast:
				must(enc.EncodeInt(f.LastExecTime))
			default:
				must(enc.EncodeInt(f.StartTime))
			}
		}
	}
	return buf.Bytes()
}

func TestAppendAggregateMatchesLibraryShortestInts(t *testing.T) {
	for i, flows := range testStates() {
		assert.Equal(t, libraryAggregate(flows), AppendAggregate(nil, flows), "state %d", i)
	}
}

func TestAppendAggregateOrdersKeysForTheLibrary(t *testing.T) {
	flows := boundaryFlows()
	dec := msgpack.NewDecoder(bytes.NewReader(AppendAggregate(nil, flows)))
	n, err := dec.DecodeMapLen()
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for _, name := range []string{"state_size", "last_exec_time_map", "start_time_map"} {
		got, err := dec.DecodeString()
		require.NoError(t, err)
		assert.Equal(t, name, got, "fields in declared order")
		n, err := dec.DecodeMapLen()
		require.NoError(t, err)
		require.Equal(t, len(flows), n)
		prev := int64(-1)
		for range n {
			id, err := dec.DecodeUint64()
			require.NoError(t, err)
			assert.Greater(t, int64(id), prev, "flow ids ascending")
			prev = int64(id)
			require.NoError(t, dec.Skip())
		}
	}
}

func TestCodesMatchMsgpcode(t *testing.T) {
	for _, c := range []struct{ ours, lib byte }{
		{codePosFixMax, msgpcode.PosFixedNumHigh}, {codeNegFixMin, msgpcode.NegFixedNumLow},
		{codeFixMap, msgpcode.FixedMapLow}, {codeFixArray, msgpcode.FixedArrayLow}, {codeFixStr, msgpcode.FixedStrLow},
		{codeNil, msgpcode.Nil}, {codeFalse, msgpcode.False}, {codeTrue, msgpcode.True},
		{codeBin8, msgpcode.Bin8}, {codeBin16, msgpcode.Bin16}, {codeBin32, msgpcode.Bin32},
		{codeExt8, msgpcode.Ext8}, {codeExt16, msgpcode.Ext16}, {codeExt32, msgpcode.Ext32},
		{codeFloat32, msgpcode.Float}, {codeFloat64, msgpcode.Double},
		{codeUint8, msgpcode.Uint8}, {codeUint16, msgpcode.Uint16}, {codeUint32, msgpcode.Uint32}, {codeUint64, msgpcode.Uint64},
		{codeInt8, msgpcode.Int8}, {codeInt16, msgpcode.Int16}, {codeInt32, msgpcode.Int32}, {codeInt64, msgpcode.Int64},
		{codeFixExt1, msgpcode.FixExt1}, {codeFixExt2, msgpcode.FixExt2}, {codeFixExt4, msgpcode.FixExt4},
		{codeFixExt8, msgpcode.FixExt8}, {codeFixExt16, msgpcode.FixExt16},
		{codeStr8, msgpcode.Str8}, {codeStr16, msgpcode.Str16}, {codeStr32, msgpcode.Str32},
		{codeArray16, msgpcode.Array16}, {codeArray32, msgpcode.Array32}, {codeMap16, msgpcode.Map16}, {codeMap32, msgpcode.Map32},
	} {
		assert.Equal(t, c.lib, c.ours)
	}
}

func TestSkipAgreesWithLibrary(t *testing.T) {
	// Every item the library writes, skipAt steps over exactly.
	values := []any{nil, true, 1.5, float32(2), "s", []byte{1, 2}, []any{1, "x", []any{}}, map[string]any{"k": map[string]any{}},
		int8(-3), uint16(300), int32(-70000), uint64(math.MaxUint64), make([]byte, 70000), msgpack.RawMessage{0xd4, 1, 2}}
	for _, v := range values {
		for _, compact := range []bool{false, true} {
			b := libraryMarshal(t, v, compact)
			next, st := skipAt(b, 0, 2)
			require.Equal(t, ok, st, "%T", v)
			assert.Equal(t, len(b), next, "%T", v)
		}
	}
}

// testNodeViews returns node views with values at the edge of every
// msgpack integer form, with and without node epochs, and of lengths on
// both sides of each array header form.
func testNodeViews() [][]NodeView {
	epochs := []uint64{0, 127, 128, math.MaxUint32 + 1, math.MaxUint64}
	times := []int64{0, 127, 128, -1, -33, math.MinInt32 - 1, 1_700_000_000_000, math.MaxInt64, math.MinInt64}
	node := func(i int) NodeView {
		v := NodeView{NodeID: uint64(i) * 0x1_0000_0001, LastReport: times[i%len(times)], Flows: i * 1000}
		if i%3 != 0 {
			v.NodeEpoch = &epochs[i%len(epochs)]
		}
		return v
	}
	views := [][]NodeView{nil, {{}}, {{NodeEpoch: &epochs[0]}}, {{NodeID: math.MaxUint64, LastReport: math.MinInt64, Flows: math.MaxInt64}}}
	for _, n := range []int{1, 15, 16, 100, 65535, 65536} {
		view := make([]NodeView, n)
		for i := range view {
			view[i] = node(i)
		}
		views = append(views, view)
	}
	return views
}

func TestAppendNodesMatchesLibraryShortestInts(t *testing.T) {
	for i, view := range testNodeViews() {
		if view == nil {
			view = []NodeView{} // the library writes nil for a nil slice; the view is an array
		}
		got := AppendNodes(nil, view)
		assert.Equal(t, libraryMarshal(t, view, true), got, "view %d", i)

		var back []NodeView
		require.NoError(t, msgpack.Unmarshal(got, &back), "view %d", i)
		assert.Equal(t, view, back, "view %d", i)

		assert.LessOrEqual(t, MinNodesLen(len(view)), len(got), "view %d: a lower bound", i)
	}
}

func TestMinNodesLenIsTheSmallestView(t *testing.T) {
	zero := uint64(0)
	for _, n := range []int{0, 1, 15, 16, 65535, 65536} {
		smallest := make([]NodeView, n)
		withEpochs := make([]NodeView, n)
		for i := range withEpochs {
			withEpochs[i].NodeEpoch = &zero
		}
		assert.Equal(t, len(libraryMarshal(t, smallest, true)), MinNodesLen(n), "%d nodes of zeros", n)
		assert.Equal(t, len(libraryMarshal(t, withEpochs, true)), MinNodesLen(n), "%d nodes of zeros, epoch 0", n)
	}
}
