package flowstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// DecodeValue parses the stored (serde_json) form of a value, as GreptimeDB's
// try_from_raw_value does. As with serde's derive: field names match exactly,
// unknown fields are ignored, start_time_map may be absent (legacy values) and
// is then empty, state_size and last_exec_time_map are required. Flow ids must
// be canonical decimal uint32 strings, state sizes uint64 and times int64 JSON
// integers (not floats, not quoted). Any other input returns an error
// wrapping ErrInvalidValue.
func DecodeValue(data []byte) (FlowStateValue, error) {
	// Fields are looked up by exact name: encoding/json would match struct
	// fields case-insensitively, serde does not.
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fields); err != nil {
		return FlowStateValue{}, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return FlowStateValue{}, fmt.Errorf("%w: trailing data after the value", ErrInvalidValue)
	}
	var maps [3]map[string]json.RawMessage
	for i, name := range [3]string{"state_size", "last_exec_time_map", "start_time_map"} {
		raw, ok := fields[name]
		if !ok {
			if name == "start_time_map" {
				continue // #[serde(default)]
			}
			return FlowStateValue{}, fmt.Errorf("%w: missing field %s", ErrInvalidValue, name)
		}
		// Values stay raw so that a quoted number is rejected, as serde
		// does, and ranges are checked exactly.
		if err := json.Unmarshal(raw, &maps[i]); err != nil || maps[i] == nil {
			return FlowStateValue{}, fmt.Errorf("%w: %s is not a map of flow id to integer", ErrInvalidValue, name)
		}
	}
	v := FlowStateValue{
		StateSize:       make(map[FlowID]uint64, len(maps[0])),
		LastExecTimeMap: make(map[FlowID]int64, len(maps[1])),
		StartTimeMap:    make(map[FlowID]int64, len(maps[2])),
	}
	for k, n := range maps[0] {
		id, err := parseJSONFlowID("state_size", k)
		if err != nil {
			return FlowStateValue{}, err
		}
		s, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil {
			return FlowStateValue{}, fmt.Errorf("%w: state_size[%q]: %s is not an unsigned 64-bit integer", ErrInvalidValue, k, n)
		}
		v.StateSize[id] = s
	}
	for _, m := range []struct {
		field string
		src   map[string]json.RawMessage
		dst   map[FlowID]int64
	}{
		{"last_exec_time_map", maps[1], v.LastExecTimeMap},
		{"start_time_map", maps[2], v.StartTimeMap},
	} {
		for k, n := range m.src {
			id, err := parseJSONFlowID(m.field, k)
			if err != nil {
				return FlowStateValue{}, err
			}
			t, err := strconv.ParseInt(string(n), 10, 64)
			if err != nil {
				return FlowStateValue{}, fmt.Errorf("%w: %s[%q]: %s is not a signed 64-bit integer", ErrInvalidValue, m.field, k, n)
			}
			m.dst[id] = t
		}
	}
	return v, nil
}

// parseJSONFlowID parses a flow id map key as serde_json does: a JSON
// integer in a string, so no sign and no leading zero.
func parseJSONFlowID(field, k string) (FlowID, error) {
	id, err := strconv.ParseUint(k, 10, 32)
	if err != nil || (len(k) > 1 && k[0] == '0') {
		return 0, fmt.Errorf("%w: %s: flow id %q is not an unsigned 32-bit integer", ErrInvalidValue, field, k)
	}
	return FlowID(id), nil
}
