package codec

import "flowstate/flowstate"

// AppendAggregate appends the msgpack form of the aggregate, given as flows
// sorted by ID, to dst: a map with the string keys state_size,
// last_exec_time_map and start_time_map in that order, each a map with
// integer flow id keys in ascending order, every integer in its shortest
// form. Equal states give equal bytes. It makes four passes over flows and
// does not allocate beyond growing dst.
func AppendAggregate(dst []byte, flows []flowstate.Flow) []byte {
	return appendFlowMaps(append(dst, codeFixMap|3), flows)
}

// DecodeAggregate decodes an aggregate in msgpack form, as AppendAggregate
// writes it or as any other msgpack encoder may: flow ids may be integers
// or decimal strings, in any order; an absent or nil map is empty; unknown
// fields are skipped. The rules on types and ranges are the report's. An
// invalid body returns a *DecodeError that wraps ErrInvalidAggregate. The
// maps of the value are never nil.
func DecodeAggregate(data []byte) (flowstate.FlowStateValue, error) {
	var d Decoder
	var r Report
	if err := d.decode(data, &r, true); err != nil {
		return flowstate.FlowStateValue{}, err
	}
	return r.Value(), nil
}
