package e2e

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
)

// flowState is GreptimeDB's FlowStateValue: a report's content or the
// aggregate. Nil maps are empty.
type flowState struct {
	StateSize    map[uint32]uint64
	LastExecTime map[uint32]int64
	StartTime    map[uint32]int64
}

// lastExec is GreptimeDB's tests' state(): only last execution times.
func lastExec(m map[uint32]int64) flowState {
	return flowState{LastExecTime: m}
}

// normalized returns s with empty maps instead of nil ones, for comparison.
func (s flowState) normalized() flowState {
	if s.StateSize == nil {
		s.StateSize = map[uint32]uint64{}
	}
	if s.LastExecTime == nil {
		s.LastExecTime = map[uint32]int64{}
	}
	if s.StartTime == nil {
		s.StartTime = map[uint32]int64{}
	}
	return s
}

// keyStyle is how a report encoded with the msgpack library writes flow ids.
type keyStyle int

const (
	intKeys    keyStyle = iota // msgpack integers of rotating widths
	stringKeys                 // canonical decimal strings, as many libraries write map keys
	mixedKeys                  // integers and strings, alternating
)

func (k keyStyle) String() string {
	return [...]string{"int keys", "string keys", "mixed keys"}[k]
}

// reportMap builds a report as a generic map for the msgpack library: string
// field names, flow ids as style says, values in rotating integer widths.
// Nil maps of s are left out (absent means empty).
func reportMap(node uint64, s flowState, style keyStyle) map[string]any {
	m := map[string]any{"node_id": node}
	k := 0
	key := func(id uint32) any {
		k++
		if style == stringKeys || (style == mixedKeys && k%2 == 0) {
			return strconv.FormatUint(uint64(id), 10)
		}
		return sizedUint(uint64(id), k)
	}
	if s.StateSize != nil {
		mm := make(map[any]any, len(s.StateSize))
		for id, v := range s.StateSize {
			mm[key(id)] = sizedUint(v, k+3)
		}
		m["state_size"] = mm
	}
	for _, f := range []struct {
		name string
		src  map[uint32]int64
	}{{"last_exec_time_map", s.LastExecTime}, {"start_time_map", s.StartTime}} {
		if f.src == nil {
			continue
		}
		mm := make(map[any]any, len(f.src))
		for id, v := range f.src {
			mm[key(id)] = sizedInt(v, k+5)
		}
		m[f.name] = mm
	}
	return m
}

// sizedUint returns v as one of Go's integer types, chosen by k among those
// that hold v, so that the msgpack library writes it in that width.
func sizedUint(v uint64, k int) any {
	conv := []func() (any, bool){
		func() (any, bool) { return uint8(v), v <= math.MaxUint8 },
		func() (any, bool) { return int8(v), v <= math.MaxInt8 },
		func() (any, bool) { return uint16(v), v <= math.MaxUint16 },
		func() (any, bool) { return int16(v), v <= math.MaxInt16 },
		func() (any, bool) { return uint32(v), v <= math.MaxUint32 },
		func() (any, bool) { return int32(v), v <= math.MaxInt32 },
		func() (any, bool) { return int64(v), v <= math.MaxInt64 },
	}
	for i := k % len(conv); i < len(conv); i++ {
		if x, ok := conv[i](); ok {
			return x
		}
	}
	return v
}

// sizedInt is sizedUint for signed values.
func sizedInt(v int64, k int) any {
	conv := []func() (any, bool){
		func() (any, bool) { return int8(v), v >= math.MinInt8 && v <= math.MaxInt8 },
		func() (any, bool) { return uint8(v), v >= 0 && v <= math.MaxUint8 },
		func() (any, bool) { return int16(v), v >= math.MinInt16 && v <= math.MaxInt16 },
		func() (any, bool) { return uint16(v), v >= 0 && v <= math.MaxUint16 },
		func() (any, bool) { return int32(v), v >= math.MinInt32 && v <= math.MaxInt32 },
		func() (any, bool) { return uint32(v), v >= 0 && v <= math.MaxUint32 },
		func() (any, bool) { return uint64(v), v >= 0 },
	}
	for i := k % len(conv); i < len(conv); i++ {
		if x, ok := conv[i](); ok {
			return x
		}
	}
	return v
}

// msgpackReport encodes a report with the msgpack library.
func msgpackReport(t testing.TB, node uint64, s flowState, style keyStyle) []byte {
	t.Helper()
	return marshal(t, reportMap(node, s, style))
}

// marshal encodes v with the msgpack library.
func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	require.NoError(t, err)
	return b
}

// codecReport encodes a report with the worker's own encoder.
func codecReport(node uint64, s flowState) []byte {
	return codec.AppendReport(nil, &codec.Report{NodeID: node, NodeEpoch: 1700000000000, HasNodeEpoch: true, Flows: s.value().Flows()})
}

// value is s as the worker's value type.
func (s flowState) value() flowstate.FlowStateValue {
	v := flowstate.FlowStateValue{
		StateSize:       make(map[flowstate.FlowID]uint64),
		LastExecTimeMap: make(map[flowstate.FlowID]int64),
		StartTimeMap:    make(map[flowstate.FlowID]int64),
	}
	for id, x := range s.StateSize {
		v.StateSize[flowstate.FlowID(id)] = x
	}
	for id, x := range s.LastExecTime {
		v.LastExecTimeMap[flowstate.FlowID(id)] = x
	}
	for id, x := range s.StartTime {
		v.StartTimeMap[flowstate.FlowID(id)] = x
	}
	return v
}

// encoding is one way of writing a report, so that a test can run with each.
type encoding struct {
	name   string
	encode func(t testing.TB, node uint64, s flowState) []byte
}

// encodings are the report encoders a merge test runs with.
var encodings = []encoding{
	{"msgpack library, int keys", func(t testing.TB, n uint64, s flowState) []byte { return msgpackReport(t, n, s, intKeys) }},
	{"msgpack library, string keys", func(t testing.TB, n uint64, s flowState) []byte { return msgpackReport(t, n, s, stringKeys) }},
	{"msgpack library, mixed keys", func(t testing.TB, n uint64, s flowState) []byte { return msgpackReport(t, n, s, mixedKeys) }},
	{"codec.AppendReport", func(_ testing.TB, n uint64, s flowState) []byte { return codecReport(n, s) }},
}
