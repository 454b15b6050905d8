package codec

import "github.com/flowstate-io/flowstate/flowstate"

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
	if err := d.decode(data, &r, bodyAggregate); err != nil {
		return flowstate.FlowStateValue{}, err
	}
	return r.Value(), nil
}

// AggregateLen returns len(AppendAggregate(nil, flows)) without encoding:
// one pass over flows and no writes, so that a caller can refuse an
// aggregate too large to send before paying for its encoding.
func AggregateLen(flows []flowstate.Flow) int {
	var n [3]int
	size := 1 + 3 + len("state_size") + len("last_exec_time_map") + len("start_time_map")
	for i := range flows {
		f := &flows[i]
		id := uintLen(uint64(f.ID))
		if f.Has&flowstate.HasStateSize != 0 {
			n[0]++
			size += id + uintLen(f.StateSize)
		}
		if f.Has&flowstate.HasLastExecTime != 0 {
			n[1]++
			size += id + intLen(f.LastExecTime)
		}
		if f.Has&flowstate.HasStartTime != 0 {
			n[2]++
			size += id + intLen(f.StartTime)
		}
	}
	for _, k := range n {
		size += mapLenLen(k)
	}
	return size
}

// uintLen, intLen and mapLenLen are the lengths appendUint, appendInt and
// appendMapLen write.
func uintLen(v uint64) int {
	switch {
	case v <= codePosFixMax:
		return 1
	case v <= 0xff:
		return 2
	case v <= 0xffff:
		return 3
	case v <= 0xffffffff:
		return 5
	}
	return 9
}

func intLen(v int64) int {
	switch {
	case v >= 0:
		return uintLen(uint64(v))
	case v >= -32:
		return 1
	case v >= -1<<7:
		return 2
	case v >= -1<<15:
		return 3
	case v >= -1<<31:
		return 5
	}
	return 9
}

func mapLenLen(n int) int {
	switch {
	case n <= 15:
		return 1
	case n <= 0xffff:
		return 3
	}
	return 5
}
