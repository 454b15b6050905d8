package codec

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

const (
	hasSize  = flowstate.HasStateSize
	hasLast  = flowstate.HasLastExecTime
	hasStart = flowstate.HasStartTime
	hasAll   = hasSize | hasLast | hasStart
)

func sizeFlow(id flowstate.FlowID, v uint64) flowstate.Flow {
	return flowstate.Flow{ID: id, Has: hasSize, StateSize: v}
}

func lastFlow(id flowstate.FlowID, t int64) flowstate.Flow {
	return flowstate.Flow{ID: id, Has: hasLast, LastExecTime: t}
}

func startFlow(id flowstate.FlowID, t int64) flowstate.Flow {
	return flowstate.Flow{ID: id, Has: hasStart, StartTime: t}
}

// normal makes empty Flows nil, so that reports compare by content.
func normal(r Report) Report {
	if len(r.Flows) == 0 {
		r.Flows = nil
	}
	return r
}

func TestDecodeAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		want Report
	}{
		{"node_id alone gives an empty report", node(1).Bytes(), Report{NodeID: 1}},
		{"node_id as uint8", newMP().Map(1).Str("node_id").U8(200).Bytes(), Report{NodeID: 200}},
		{"node_id as uint16", newMP().Map(1).Str("node_id").U16(7).Bytes(), Report{NodeID: 7}},
		{"node_id as uint32", newMP().Map(1).Str("node_id").U32(7).Bytes(), Report{NodeID: 7}},
		{"node_id as uint64 max", newMP().Map(1).Str("node_id").U64(math.MaxUint64).Bytes(), Report{NodeID: math.MaxUint64}},
		{"node_id as int8", newMP().Map(1).Str("node_id").I8(7).Bytes(), Report{NodeID: 7}},
		{"node_id as int16", newMP().Map(1).Str("node_id").I16(7).Bytes(), Report{NodeID: 7}},
		{"node_id as int32", newMP().Map(1).Str("node_id").I32(7).Bytes(), Report{NodeID: 7}},
		{"node_id as int64", newMP().Map(1).Str("node_id").I64(math.MaxInt64).Bytes(), Report{NodeID: math.MaxInt64}},
		{"node_id zero", newMP().Map(1).Str("node_id").Uint(0).Bytes(), Report{}},
		{"node_epoch is kept", node(2).Str("node_epoch").U64(1_700_000_000_000).Bytes(),
			Report{NodeID: 1, NodeEpoch: 1_700_000_000_000, HasNodeEpoch: true}},
		{"node_epoch zero is present", node(2).Str("node_epoch").Uint(0).Bytes(),
			Report{NodeID: 1, HasNodeEpoch: true}},
		{"nil node_epoch is absent", node(2).Str("node_epoch").Nil().Bytes(), Report{NodeID: 1}},
		{"nil maps are empty", node(4).Str("state_size").Nil().Str("last_exec_time_map").Nil().Str("start_time_map").Nil().Bytes(),
			Report{NodeID: 1}},
		{"empty maps are empty", node(4).Str("state_size").Map(0).Str("last_exec_time_map").Map(0).Str("start_time_map").Map(0).Bytes(),
			Report{NodeID: 1}},
		{"fields in any order", newMP().Map(3).Str("state_size").Map(1).Uint(7).Uint(5).Str("node_epoch").Uint(9).Str("node_id").Uint(3).Bytes(),
			Report{NodeID: 3, NodeEpoch: 9, HasNodeEpoch: true, Flows: []flowstate.Flow{sizeFlow(7, 5)}}},
		{"flow ids in every integer width",
			node(2).Str("state_size").Map(9).
				U8(1).Uint(1).U16(2).Uint(2).U32(3).Uint(3).U64(4).Uint(4).
				I8(5).Uint(5).I16(6).Uint(6).I32(7).Uint(7).I64(8).Uint(8).
				U64(math.MaxUint32).Uint(9).Bytes(),
			Report{NodeID: 1, Flows: []flowstate.Flow{
				sizeFlow(1, 1), sizeFlow(2, 2), sizeFlow(3, 3), sizeFlow(4, 4), sizeFlow(5, 5),
				sizeFlow(6, 6), sizeFlow(7, 7), sizeFlow(8, 8), sizeFlow(math.MaxUint32, 9)}}},
		{"flow ids as canonical decimal strings",
			node(2).Str("last_exec_time_map").Map(3).Str("4294967295").Int(3).Str("0").Int(1).Str("7").Int(2).Bytes(),
			Report{NodeID: 1, Flows: []flowstate.Flow{lastFlow(0, 1), lastFlow(7, 2), lastFlow(math.MaxUint32, 3)}}},
		{"flow id string in str8 form", node(2).Str("state_size").Map(1).Raw(codeStr8, 2, '4', '2').Uint(1).Bytes(),
			Report{NodeID: 1, Flows: []flowstate.Flow{sizeFlow(42, 1)}}},
		{"state sizes in every unsigned width up to max uint64",
			node(2).Str("state_size").Map(5).Uint(1).U8(1).Uint(2).U16(2).Uint(3).U32(3).Uint(4).U64(math.MaxUint64).Uint(5).I64(5).Bytes(),
			Report{NodeID: 1, Flows: []flowstate.Flow{sizeFlow(1, 1), sizeFlow(2, 2), sizeFlow(3, 3), sizeFlow(4, math.MaxUint64), sizeFlow(5, 5)}}},
		{"times at the bounds of int64",
			node(2).Str("start_time_map").Map(6).
				Uint(1).U64(math.MaxInt64).Uint(2).I64(math.MinInt64).Uint(3).Int(-1).
				Uint(4).I8(-100).Uint(5).I16(-1000).Uint(6).I32(math.MinInt32).Bytes(),
			Report{NodeID: 1, Flows: []flowstate.Flow{
				startFlow(1, math.MaxInt64), startFlow(2, math.MinInt64), startFlow(3, -1),
				startFlow(4, -100), startFlow(5, -1000), startFlow(6, math.MinInt32)}}},
		{"the three maps are joined by flow id, sorted",
			node(4).
				Str("start_time_map").Map(2).Uint(9).Int(90).Uint(3).Int(30).
				Str("state_size").Map(2).Uint(5).Uint(50).Uint(3).Uint(31).
				Str("last_exec_time_map").Map(3).Str("9").Int(91).Uint(1).Int(10).Uint(5).Int(51).Bytes(),
			Report{NodeID: 1, Flows: []flowstate.Flow{
				lastFlow(1, 10),
				{ID: 3, Has: hasSize | hasStart, StateSize: 31, StartTime: 30},
				{ID: 5, Has: hasSize | hasLast, StateSize: 50, LastExecTime: 51},
				{ID: 9, Has: hasLast | hasStart, LastExecTime: 91, StartTime: 90},
			}}},
		{"a flow id may repeat across maps",
			node(4).Str("state_size").Map(1).Uint(7).Uint(1).Str("last_exec_time_map").Map(1).Str("7").Int(2).
				Str("start_time_map").Map(1).U32(7).Int(3).Bytes(),
			Report{NodeID: 1, Flows: []flowstate.Flow{{ID: 7, Has: hasAll, StateSize: 1, LastExecTime: 2, StartTime: 3}}}},
		{"unknown fields of every type are skipped",
			node(16).
				Str("a").Nil().Str("b").Bool(true).Str("c").F32(1.5).Str("d").F64(-2).
				Str("e").Str("text").Str("f").Bin([]byte{1, 2}).Str("g").Ext(5, []byte{1, 2, 3}).
				Str("h").Ext(-1, make([]byte, 8)).Str("i").Ext(3, make([]byte, 300)).
				Str("j").Array(2).Uint(1).Str("x").Str("k").Map(1).Uint(1).Map(1).Str("y").Array(0).
				Str("l").I64(-5).Str("m").U64(math.MaxUint64).Str("").Uint(0).Str("NODE_ID").Str("x").Bytes(),
			Report{NodeID: 1}},
		{"an unknown field may hold a string of 70000 bytes",
			node(2).Str("note").Str(strings.Repeat("n", 70000)).Bytes(), Report{NodeID: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Decoder
			got, err := decodeReport(t, &d, tc.body)
			require.NoError(t, err)
			assert.Equal(t, normal(tc.want), normal(got))
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	maps := func(field string) *mp { return node(2).Str(field) }
	sizes := func() *mp { return maps("state_size").Map(1).Uint(7) }
	for _, tc := range []struct {
		name  string
		body  []byte
		field string
		kind  Kind
	}{
		{"empty body", nil, "", KindEmpty},
		{"reserved byte", []byte{codeNeverUsed}, "", KindNotMsgpack},
		{"truncated map header", []byte{codeMap16, 0}, "", KindNotMsgpack},
		{"truncated field name", newMP().Map(1).Raw(0xa7, 'n', 'o').Bytes(), "", KindNotMsgpack},
		{"truncated node_id", newMP().Map(1).Str("node_id").Raw(codeUint32, 0).Bytes(), "node_id", KindNotMsgpack},
		{"fewer fields than the header says", newMP().Map(2).Str("node_id").Uint(1).Bytes(), "", KindNotMsgpack},
		{"trailing bytes", node(1).Uint(0).Bytes(), "", KindTrailingBytes},
		{"two reports back to back", append(node(1).Bytes(), node(1).Bytes()...), "", KindTrailingBytes},
		{"top level is an array", newMP().Array(1).Uint(1).Bytes(), "", KindBadType},
		{"top level is nil", newMP().Nil().Bytes(), "", KindBadType},
		{"top level is JSON", []byte(`{"node_id":1}`), "", KindNotMsgpack},
		{"missing node_id", newMP().Map(1).Str("state_size").Map(0).Bytes(), "node_id", KindMissingNodeID},
		{"empty map", newMP().Map(0).Bytes(), "node_id", KindMissingNodeID},
		{"nil node_id", newMP().Map(1).Str("node_id").Nil().Bytes(), "node_id", KindBadType},
		{"string node_id", newMP().Map(1).Str("node_id").Str("1").Bytes(), "node_id", KindBadType},
		{"float node_id", newMP().Map(1).Str("node_id").F64(1).Bytes(), "node_id", KindBadType},
		{"negative node_id", newMP().Map(1).Str("node_id").Int(-1).Bytes(), "node_id", KindOutOfRange},
		{"negative node_id as int64", newMP().Map(1).Str("node_id").I64(math.MinInt64).Bytes(), "node_id", KindOutOfRange},
		{"negative node_epoch", node(2).Str("node_epoch").Int(-1).Bytes(), "node_epoch", KindOutOfRange},
		{"string node_epoch", node(2).Str("node_epoch").Str("1").Bytes(), "node_epoch", KindBadType},
		{"integer field name", node(2).Uint(1).Uint(2).Bytes(), "", KindBadType},
		{"binary field name", node(2).Bin([]byte("x")).Uint(2).Bytes(), "", KindBadType},
		{"nil field name", node(2).Nil().Uint(2).Bytes(), "", KindBadType},
		{"node_id named twice", node(2).Str("node_id").Uint(1).Bytes(), "node_id", KindDuplicateField},
		{"node_epoch named twice", node(3).Str("node_epoch").Nil().Str("node_epoch").Uint(1).Bytes(), "node_epoch", KindDuplicateField},
		{"state_size named twice", node(3).Str("state_size").Nil().Str("state_size").Map(0).Bytes(), "state_size", KindDuplicateField},
		{"unknown field named twice", node(4).Str("x").Uint(1).Str("y").Uint(1).Str("x").Nil().Bytes(), "x", KindDuplicateField},
		{"state_size is an array", maps("state_size").Array(0).Bytes(), "state_size", KindBadType},
		{"last_exec_time_map is a string", maps("last_exec_time_map").Str("{}").Bytes(), "last_exec_time_map", KindBadType},
		{"start_time_map is an integer", maps("start_time_map").Uint(0).Bytes(), "start_time_map", KindBadType},
		{"truncated map", maps("state_size").Map(2).Uint(1).Uint(1).Bytes(), "state_size", KindNotMsgpack},
		{"float flow id", maps("state_size").Map(1).F64(7).Uint(1).Bytes(), "state_size", KindBadFlowID},
		{"nil flow id", maps("state_size").Map(1).Nil().Uint(1).Bytes(), "state_size", KindBadFlowID},
		{"bool flow id", maps("state_size").Map(1).Bool(true).Uint(1).Bytes(), "state_size", KindBadFlowID},
		{"binary flow id", maps("state_size").Map(1).Bin([]byte("7")).Uint(1).Bytes(), "state_size", KindBadFlowID},
		{"array flow id", maps("state_size").Map(1).Array(0).Uint(1).Bytes(), "state_size", KindBadFlowID},
		{"negative flow id", maps("state_size").Map(1).Int(-1).Uint(1).Bytes(), "state_size[-1]", KindBadFlowID},
		{"flow id above uint32", maps("state_size").Map(1).Uint(1 << 32).Uint(1).Bytes(), "state_size[4294967296]", KindBadFlowID},
		{"flow id string with a leading zero", maps("last_exec_time_map").Map(1).Str("07").Int(1).Bytes(), `last_exec_time_map["07"]`, KindBadFlowID},
		{"flow id string with a plus sign", maps("state_size").Map(1).Str("+7").Uint(1).Bytes(), `state_size["+7"]`, KindBadFlowID},
		{"flow id string with a minus sign", maps("state_size").Map(1).Str("-1").Uint(1).Bytes(), `state_size["-1"]`, KindBadFlowID},
		{"empty flow id string", maps("state_size").Map(1).Str("").Uint(1).Bytes(), `state_size[""]`, KindBadFlowID},
		{"flow id string with a space", maps("state_size").Map(1).Str(" 7").Uint(1).Bytes(), `state_size[" 7"]`, KindBadFlowID},
		{"flow id string above uint32", maps("state_size").Map(1).Str("4294967296").Uint(1).Bytes(), `state_size["4294967296"]`, KindBadFlowID},
		{"flow id string of 11 digits", maps("state_size").Map(1).Str("10000000000").Uint(1).Bytes(), `state_size["10000000000"]`, KindBadFlowID},
		{"flow id string in hex", maps("state_size").Map(1).Str("0x7").Uint(1).Bytes(), `state_size["0x7"]`, KindBadFlowID},
		{"same flow twice", maps("state_size").Map(2).Uint(7).Uint(1).Uint(7).Uint(2).Bytes(), "state_size[7]", KindDuplicateFlow},
		{"same flow as integer and string", maps("start_time_map").Map(2).Str("7").Int(1).U64(7).Int(2).Bytes(), "start_time_map[7]", KindDuplicateFlow},
		{"same flow twice in a large unsorted map", func() []byte {
			m := maps("state_size").Map(41)
			for i := 40; i > 0; i-- {
				m.Uint(uint64(i * 1000)).Uint(1)
			}
			return m.Uint(20000).Uint(2).Bytes()
		}(), "state_size[20000]", KindDuplicateFlow},
		{"negative state size", sizes().Int(-1).Bytes(), "state_size[7]", KindOutOfRange},
		{"negative state size as int64", sizes().I64(-1 << 40).Bytes(), "state_size[7]", KindOutOfRange},
		{"float state size", sizes().F64(1).Bytes(), "state_size[7]", KindBadType},
		{"string state size", sizes().Str("1").Bytes(), "state_size[7]", KindBadType},
		{"nil state size", sizes().Nil().Bytes(), "state_size[7]", KindBadType},
		{"bool state size", sizes().Bool(false).Bytes(), "state_size[7]", KindBadType},
		{"map state size", sizes().Map(0).Bytes(), "state_size[7]", KindBadType},
		{"time above int64", maps("last_exec_time_map").Map(1).Uint(7).U64(math.MaxInt64 + 1).Bytes(), "last_exec_time_map[7]", KindOutOfRange},
		{"float time", maps("start_time_map").Map(1).Uint(7).F32(1).Bytes(), "start_time_map[7]", KindBadType},
		{"nil time", maps("start_time_map").Map(1).Uint(7).Nil().Bytes(), "start_time_map[7]", KindBadType},
		{"truncated time", maps("start_time_map").Map(1).Uint(7).Raw(codeInt64, 1, 2).Bytes(), "start_time_map[7]", KindNotMsgpack},
		{"reserved byte as a value", sizes().Raw(codeNeverUsed).Bytes(), "state_size[7]", KindNotMsgpack},
		{"reserved byte as a flow id", maps("state_size").Map(1).Raw(codeNeverUsed).Uint(1).Bytes(), "state_size", KindNotMsgpack},
		{"reserved byte in an unknown field", node(2).Str("x").Array(1).Raw(codeNeverUsed).Bytes(), "x", KindNotMsgpack},
		{"truncated string in an unknown field", node(2).Str("x").Raw(codeStr32, 0x80, 0, 0, 0, 'a').Bytes(), "x", KindNotMsgpack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Decoder
			r := Report{NodeID: 9, Flows: make([]flowstate.Flow, 1, 4)}
			err := d.Decode(tc.body, &r)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			assert.Equal(t, tc.field, de.Field, "field")
			assert.Equal(t, tc.kind, de.Kind, "kind (%v)", err)
			assert.ErrorIs(t, err, ErrInvalidReport)
			assert.NotErrorIs(t, err, ErrInvalidAggregate)
			assert.NotContains(t, err.Error(), "\n")
			assert.Equal(t, Report{Flows: r.Flows}, r, "a rejected report leaves r empty")
			assert.Empty(t, r.Flows)
		})
	}
}

func TestDecodeErrorReadsAsOneLine(t *testing.T) {
	var d Decoder
	body := node(2).Str("state_size").Map(1).Uint(7).Int(-1).Bytes()
	err := d.Decode(body, &Report{})
	assert.EqualError(t, err, "codec: state_size[7]: negative size -1")

	err = d.Decode(node(1).Uint(0).Bytes(), &Report{})
	assert.EqualError(t, err, "codec: 1 bytes after the report")

	body = node(3).Str("a\nb").Nil().Str("a\nb").Nil().Bytes()
	err = d.Decode(body, &Report{})
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, `"a\nb"`, de.Field, "a field name that is not a plain word is quoted")
	assert.Equal(t, KindDuplicateField, de.Kind)
	assert.EqualError(t, err, `codec: "a\nb": named twice`)

	long := strings.Repeat("x", 1000)
	err = d.Decode(node(2).Str("state_size").Map(1).Str(long).Uint(1).Bytes(), &Report{})
	require.ErrorAs(t, err, &de)
	assert.Equal(t, `state_size["`+long[:maxQuoted]+`"...]`, de.Field, "a long string is cut")
}

func TestDecodeDoesNotAllocateInSteadyState(t *testing.T) {
	flows := fullFlows(1000)
	v := flowstate.ValueOf(flows)
	strKeys := map[string]any{"node_id": 1}
	for _, m := range []struct {
		name string
		src  map[flowstate.FlowID]int64
	}{{"last_exec_time_map", v.LastExecTimeMap}, {"start_time_map", v.StartTimeMap}} {
		sm := map[string]int64{}
		for id, t := range m.src {
			sm[strconv.FormatUint(uint64(id), 10)] = t
		}
		strKeys[m.name] = sm
	}
	strKeys["extra"] = []any{1, "two", map[string]any{"three": 3.0}}
	strKeys["more"] = nil
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"sorted integer ids", AppendReport(nil, &Report{NodeID: 1, NodeEpoch: 5, HasNodeEpoch: true, Flows: flows})},
		{"unsorted ids of fixed width", libraryMarshal(t, wireOf(1, v), false)},
		{"unsorted string ids and unknown fields", libraryMarshal(t, strKeys, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decoder{MaxFlows: 100_000}
			var r Report
			require.NoError(t, d.Decode(tc.body, &r))
			require.Len(t, r.Flows, 1000)
			allocs := testing.AllocsPerRun(100, func() {
				if err := d.Decode(tc.body, &r); err != nil {
					t.Fatal(err)
				}
			})
			assert.Zero(t, allocs)
		})
	}
}

func TestDecodeReusesFlowsCapacity(t *testing.T) {
	var d Decoder
	r := Report{Flows: make([]flowstate.Flow, 0, 10)}
	first := &r.Flows[:1][0]
	require.NoError(t, d.Decode(AppendReport(nil, &Report{NodeID: 1, Flows: fullFlows(10)}), &r))
	assert.Same(t, first, &r.Flows[0])

	require.NoError(t, d.Decode(node(1).Bytes(), &r))
	assert.Empty(t, r.Flows)
	assert.Equal(t, 10, cap(r.Flows))
}

func TestDecodeKeepsNoReferenceToData(t *testing.T) {
	var d Decoder
	want := Report{NodeID: 1, Flows: fullFlows(50)}
	body := AppendReport(nil, &want)
	got, err := decodeReport(t, &d, body)
	require.NoError(t, err)
	clear(body)
	assert.Equal(t, want, got)
}

func TestDecodeErrorsAreNilInterfaces(t *testing.T) {
	var d Decoder
	err := d.Decode(node(1).Bytes(), &Report{})
	assert.True(t, err == nil, "a typed nil must not leak into the error interface")
	_, err = DecodeAggregate(AppendAggregate(nil, nil))
	assert.True(t, err == nil)
	assert.False(t, errors.Is(d.Decode(nil, &Report{}), ErrInvalidAggregate))
}
