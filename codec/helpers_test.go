package codec

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/flowstate-io/flowstate/flowstate"
)

// mp writes msgpack item by item with msgpack/v5's Encoder, so that test
// inputs come from an encoder other than the one under test.
type mp struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

func newMP() *mp {
	m := &mp{}
	m.enc = msgpack.NewEncoder(&m.buf)
	return m
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func (m *mp) Map(n int) *mp     { must(m.enc.EncodeMapLen(n)); return m }
func (m *mp) Array(n int) *mp   { must(m.enc.EncodeArrayLen(n)); return m }
func (m *mp) Str(s string) *mp  { must(m.enc.EncodeString(s)); return m }
func (m *mp) Bin(b []byte) *mp  { must(m.enc.EncodeBytes(b)); return m }
func (m *mp) Nil() *mp          { must(m.enc.EncodeNil()); return m }
func (m *mp) Bool(v bool) *mp   { must(m.enc.EncodeBool(v)); return m }
func (m *mp) F32(v float32) *mp { must(m.enc.EncodeFloat32(v)); return m }
func (m *mp) F64(v float64) *mp { must(m.enc.EncodeFloat64(v)); return m }
func (m *mp) Uint(v uint64) *mp { must(m.enc.EncodeUint(v)); return m } // shortest form
func (m *mp) Int(v int64) *mp   { must(m.enc.EncodeInt(v)); return m }  // shortest form
func (m *mp) U8(v uint8) *mp    { must(m.enc.EncodeUint8(v)); return m }
func (m *mp) U16(v uint16) *mp  { must(m.enc.EncodeUint16(v)); return m }
func (m *mp) U32(v uint32) *mp  { must(m.enc.EncodeUint32(v)); return m }
func (m *mp) U64(v uint64) *mp  { must(m.enc.EncodeUint64(v)); return m }
func (m *mp) I8(v int8) *mp     { must(m.enc.EncodeInt8(v)); return m }
func (m *mp) I16(v int16) *mp   { must(m.enc.EncodeInt16(v)); return m }
func (m *mp) I32(v int32) *mp   { must(m.enc.EncodeInt32(v)); return m }
func (m *mp) I64(v int64) *mp   { must(m.enc.EncodeInt64(v)); return m }
func (m *mp) Raw(b ...byte) *mp { m.buf.Write(b); return m }
func (m *mp) Bytes() []byte     { return bytes.Clone(m.buf.Bytes()) }
func (m *mp) Ext(typ int8, data []byte) *mp {
	must(m.enc.EncodeExtHeader(typ, len(data)))
	m.buf.Write(data)
	return m
}

// node starts a report map of n fields with node_id 1 as its first field.
func node(n int) *mp { return newMP().Map(n).Str("node_id").Uint(1) }

// randomFlows returns n flows with random ids below maxID (n <= maxID),
// sorted, each with a random non-empty subset of fields (the others zero),
// values spread over every integer width.
func randomFlows(rng *rand.Rand, n int, maxID uint32) []flowstate.Flow {
	ids := make(map[uint32]bool, n)
	for len(ids) < n {
		ids[rng.Uint32N(maxID)] = true
	}
	flows := make([]flowstate.Flow, 0, n)
	for id := range ids {
		f := flowstate.Flow{ID: flowstate.FlowID(id), Has: flowstate.Fields(1 + rng.IntN(7))}
		if f.Has&flowstate.HasStateSize != 0 {
			f.StateSize = rng.Uint64() >> rng.IntN(65)
		}
		if f.Has&flowstate.HasLastExecTime != 0 {
			f.LastExecTime = int64(rng.Uint64()) >> rng.IntN(65)
		}
		if f.Has&flowstate.HasStartTime != 0 {
			f.StartTime = int64(rng.Uint64()) >> rng.IntN(65)
		}
		flows = append(flows, f)
	}
	return sortFlows(flows)
}

// fullFlows returns n flows 1..n with all three fields and realistic values.
func fullFlows(n int) []flowstate.Flow {
	flows := make([]flowstate.Flow, n)
	for i := range flows {
		flows[i] = flowstate.Flow{
			ID:           flowstate.FlowID(i + 1),
			Has:          flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
			StateSize:    uint64(1024 * (i + 1)),
			LastExecTime: 1_700_000_000_000 + int64(i),
			StartTime:    1_690_000_000_000 + int64(i),
		}
	}
	return flows
}

func sortFlows(flows []flowstate.Flow) []flowstate.Flow {
	return flowstate.ValueOf(flows).Flows()
}

// wireStruct is a report as a Go program would declare it for msgpack/v5.
type wireStruct struct {
	NodeID          uint64            `msgpack:"node_id"`
	StateSize       map[uint32]uint64 `msgpack:"state_size"`
	LastExecTimeMap map[uint32]int64  `msgpack:"last_exec_time_map"`
	StartTimeMap    map[uint32]int64  `msgpack:"start_time_map"`
}

func wireOf(nodeID uint64, v flowstate.FlowStateValue) wireStruct {
	w := wireStruct{
		NodeID:          nodeID,
		StateSize:       map[uint32]uint64{},
		LastExecTimeMap: map[uint32]int64{},
		StartTimeMap:    map[uint32]int64{},
	}
	for id, s := range v.StateSize {
		w.StateSize[uint32(id)] = s
	}
	for id, t := range v.LastExecTimeMap {
		w.LastExecTimeMap[uint32(id)] = t
	}
	for id, t := range v.StartTimeMap {
		w.StartTimeMap[uint32(id)] = t
	}
	return w
}

// libraryMarshal encodes v with msgpack/v5, compact ints or not.
func libraryMarshal(tb testing.TB, v any, compact bool) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(compact)
	if err := enc.Encode(v); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func decodeReport(tb testing.TB, d *Decoder, data []byte) (Report, error) {
	tb.Helper()
	var r Report
	err := d.Decode(data, &r)
	return r, err
}
