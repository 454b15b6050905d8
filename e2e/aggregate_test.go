package e2e

import (
	"bytes"
	"encoding/binary"
	"maps"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// aggregateFields are the aggregate's keys, in their wire order.
var aggregateFields = []string{"state_size", "last_exec_time_map", "start_time_map"}

// decodeAggregate decodes a msgpack aggregate with the msgpack library's
// reflection decoder, and requires exactly the three fields and no trailing
// bytes.
func decodeAggregate(t testing.TB, body []byte) flowState {
	t.Helper()
	r := bytes.NewReader(body)
	var top map[string]msgpack.RawMessage
	require.NoError(t, msgpack.NewDecoder(r).Decode(&top), "aggregate %x", body)
	require.Zero(t, r.Len(), "trailing bytes after the aggregate %x", body)
	require.ElementsMatch(t, aggregateFields, slices.Collect(maps.Keys(top)), "aggregate fields")
	var s flowState
	require.NoError(t, msgpack.Unmarshal(top["state_size"], &s.StateSize))
	require.NoError(t, msgpack.Unmarshal(top["last_exec_time_map"], &s.LastExecTime))
	require.NoError(t, msgpack.Unmarshal(top["start_time_map"], &s.StartTime))
	return s.normalized()
}

// serdeJSON writes what serde_json writes for GreptimeDB's FlowStateValue:
// fields in declared order, no spaces, flow ids as strings in ascending
// numeric order.
func serdeJSON(s flowState) []byte {
	var b []byte
	b = append(b, `{"state_size":{`...)
	for i, id := range sortedIDs(s.StateSize) {
		b = appendJSONKey(b, i, id)
		b = strconv.AppendUint(b, s.StateSize[id], 10)
	}
	b = append(b, `},"last_exec_time_map":{`...)
	for i, id := range sortedIDs(s.LastExecTime) {
		b = appendJSONKey(b, i, id)
		b = strconv.AppendInt(b, s.LastExecTime[id], 10)
	}
	b = append(b, `},"start_time_map":{`...)
	for i, id := range sortedIDs(s.StartTime) {
		b = appendJSONKey(b, i, id)
		b = strconv.AppendInt(b, s.StartTime[id], 10)
	}
	return append(b, "}}"...)
}

func appendJSONKey(b []byte, i int, id uint32) []byte {
	if i > 0 {
		b = append(b, ',')
	}
	return append(strconv.AppendUint(append(b, '"'), uint64(id), 10), `":`...)
}

func sortedIDs[V any](m map[uint32]V) []uint32 {
	return slices.Sorted(maps.Keys(m))
}

// canonicalMsgpack writes the canonical msgpack aggregate of PROTOCOL.md,
// independently of the worker's codec: the three string keys in order, flow
// ids ascending, every integer in its shortest form (non-negative values in
// the unsigned family).
func canonicalMsgpack(s flowState) []byte {
	b := []byte{0x83}
	b = mpStr(b, "state_size")
	b = mpMapLen(b, len(s.StateSize))
	for _, id := range sortedIDs(s.StateSize) {
		b = mpUint(mpUint(b, uint64(id)), s.StateSize[id])
	}
	b = mpStr(b, "last_exec_time_map")
	b = mpMapLen(b, len(s.LastExecTime))
	for _, id := range sortedIDs(s.LastExecTime) {
		b = mpInt(mpUint(b, uint64(id)), s.LastExecTime[id])
	}
	b = mpStr(b, "start_time_map")
	b = mpMapLen(b, len(s.StartTime))
	for _, id := range sortedIDs(s.StartTime) {
		b = mpInt(mpUint(b, uint64(id)), s.StartTime[id])
	}
	return b
}

func mpStr(b []byte, s string) []byte { return append(append(b, 0xa0|byte(len(s))), s...) }

func mpMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

func mpUint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<7:
		return append(b, byte(v))
	case v < 1<<8:
		return append(b, 0xcc, byte(v))
	case v < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v < 1<<32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func mpInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return mpUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= -1<<7:
		return append(b, 0xd0, byte(v))
	case v >= -1<<15:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= -1<<31:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}
