package flowstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// ErrInvalidValue is wrapped by the errors of DecodeValue.
var ErrInvalidValue = errors.New("flowstate: invalid flow state value")

// AppendJSON appends the stored form of a value, given as flows sorted by ID,
// to dst: exactly the bytes serde_json writes for GreptimeDB's FlowStateValue,
// e.g. {"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}.
// Fields are in declared order, there are no spaces, and flow ids are strings
// in ascending numeric order. It costs three passes over flows and no
// allocation beyond growing dst.
func AppendJSON(dst []byte, flows []Flow) []byte {
	dst = append(dst, `{"state_size":{`...)
	first := true
	for i := range flows {
		f := &flows[i]
		if f.Has&HasStateSize != 0 {
			dst = appendKey(dst, f.ID, first)
			dst = strconv.AppendUint(dst, f.StateSize, 10)
			first = false
		}
	}
	dst = append(dst, `},"last_exec_time_map":{`...)
	first = true
	for i := range flows {
		f := &flows[i]
		if f.Has&HasLastExecTime != 0 {
			dst = appendKey(dst, f.ID, first)
			dst = strconv.AppendInt(dst, f.LastExecTime, 10)
			first = false
		}
	}
	dst = append(dst, `},"start_time_map":{`...)
	first = true
	for i := range flows {
		f := &flows[i]
		if f.Has&HasStartTime != 0 {
			dst = appendKey(dst, f.ID, first)
			dst = strconv.AppendInt(dst, f.StartTime, 10)
			first = false
		}
	}
	return append(dst, "}}"...)
}

func appendKey(dst []byte, id FlowID, first bool) []byte {
	if !first {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = strconv.AppendUint(dst, uint64(id), 10)
	return append(dst, `":`...)
}

// Encode returns the stored (serde_json) form of v, as the seed's
// try_as_raw_value does.
func (v FlowStateValue) Encode() []byte {
	return AppendJSON(nil, v.Flows())
}

// jsonValue is the shape DecodeValue accepts. Flow ids stay strings so that
// they can be checked one by one; numbers stay json.Number so that their range
// is checked exactly.
type jsonValue struct {
	StateSize       *map[string]json.Number `json:"state_size"`
	LastExecTimeMap *map[string]json.Number `json:"last_exec_time_map"`
	StartTimeMap    map[string]json.Number  `json:"start_time_map"`
}

// DecodeValue parses the stored (serde_json) form of a value, as the seed's
// try_from_raw_value does. As with serde's derive: unknown fields are
// ignored, start_time_map may be absent (legacy values) and is then empty,
// state_size and last_exec_time_map are required. Flow ids must be decimal
// uint32 strings, state sizes uint64 and times int64. Any other input returns
// an error wrapping ErrInvalidValue.
func DecodeValue(data []byte) (FlowStateValue, error) {
	var raw jsonValue
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return FlowStateValue{}, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	if _, err := dec.Token(); err == nil {
		return FlowStateValue{}, fmt.Errorf("%w: trailing data after the value", ErrInvalidValue)
	}
	if raw.StateSize == nil || *raw.StateSize == nil {
		return FlowStateValue{}, fmt.Errorf("%w: missing field state_size", ErrInvalidValue)
	}
	if raw.LastExecTimeMap == nil || *raw.LastExecTimeMap == nil {
		return FlowStateValue{}, fmt.Errorf("%w: missing field last_exec_time_map", ErrInvalidValue)
	}
	v := FlowStateValue{
		StateSize:       make(map[FlowID]uint64, len(*raw.StateSize)),
		LastExecTimeMap: make(map[FlowID]int64, len(*raw.LastExecTimeMap)),
		StartTimeMap:    make(map[FlowID]int64, len(raw.StartTimeMap)),
	}
	for k, n := range *raw.StateSize {
		id, err := parseJSONFlowID("state_size", k)
		if err != nil {
			return FlowStateValue{}, err
		}
		s, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil {
			return FlowStateValue{}, fmt.Errorf("%w: state_size[%q]: %q is not an unsigned 64-bit integer", ErrInvalidValue, k, n)
		}
		v.StateSize[id] = s
	}
	for _, m := range []struct {
		field string
		src   map[string]json.Number
		dst   map[FlowID]int64
	}{
		{"last_exec_time_map", *raw.LastExecTimeMap, v.LastExecTimeMap},
		{"start_time_map", raw.StartTimeMap, v.StartTimeMap},
	} {
		for k, n := range m.src {
			id, err := parseJSONFlowID(m.field, k)
			if err != nil {
				return FlowStateValue{}, err
			}
			t, err := strconv.ParseInt(n.String(), 10, 64)
			if err != nil {
				return FlowStateValue{}, fmt.Errorf("%w: %s[%q]: %q is not a signed 64-bit integer", ErrInvalidValue, m.field, k, n)
			}
			m.dst[id] = t
		}
	}
	return v, nil
}

func parseJSONFlowID(field, k string) (FlowID, error) {
	id, err := strconv.ParseUint(k, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: flow id %q is not an unsigned 32-bit integer", ErrInvalidValue, field, k)
	}
	return FlowID(id), nil
}
