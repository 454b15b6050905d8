package codec

import (
	"errors"
	"fmt"
	"math"

	"github.com/flowstate-io/flowstate/flowstate"
)

// ErrInvalidDelta is wrapped by every error of DecodeDelta.
var ErrInvalidDelta = errors.New("codec: invalid delta")

// AppendDelta appends the msgpack body of a delta update (PROTOCOL.md v2,
// flow.state.delta) to dst: a map with the string keys base and flows in that
// order; flows maps each flow id, ascending, to an array of 3,
// [state_size, last_exec_time, start_time], each nil when the field is
// absent, so that a flow with Has == 0 is [nil, nil, nil]: it left the
// aggregate. flows must be sorted by ID, each ID once. Every integer takes
// its shortest form. It does not allocate beyond growing dst.
func AppendDelta(dst []byte, base uint64, flows []flowstate.Flow) []byte {
	dst = append(dst, codeFixMap|2)
	dst = appendUint(appendName(dst, "base"), base)
	dst = appendMapLen(appendName(dst, "flows"), len(flows))
	for i := range flows {
		f := &flows[i]
		dst = append(appendUint(dst, uint64(f.ID)), codeFixArray|3)
		if f.Has&flowstate.HasStateSize != 0 {
			dst = appendUint(dst, f.StateSize)
		} else {
			dst = append(dst, codeNil)
		}
		if f.Has&flowstate.HasLastExecTime != 0 {
			dst = appendInt(dst, f.LastExecTime)
		} else {
			dst = append(dst, codeNil)
		}
		if f.Has&flowstate.HasStartTime != 0 {
			dst = appendInt(dst, f.StartTime)
		} else {
			dst = append(dst, codeNil)
		}
	}
	return dst
}

// DeltaLen returns len(AppendDelta(nil, base, flows)) without encoding, so
// that a delta too large to send is refused before it is encoded.
func DeltaLen(base uint64, flows []flowstate.Flow) int {
	size := 1 + 1 + len("base") + uintLen(base) + 1 + len("flows") + mapLenLen(len(flows))
	for i := range flows {
		size += FlowDeltaLen(&flows[i])
	}
	return size
}

// FlowDeltaLen is the size of one flow's entry in a delta: its id and its
// array of 3.
func FlowDeltaLen(f *flowstate.Flow) int {
	n := uintLen(uint64(f.ID)) + 1 + 3 // the array header and one byte per field when nil
	if f.Has&flowstate.HasStateSize != 0 {
		n += uintLen(f.StateSize) - 1
	}
	if f.Has&flowstate.HasLastExecTime != 0 {
		n += intLen(f.LastExecTime) - 1
	}
	if f.Has&flowstate.HasStartTime != 0 {
		n += intLen(f.StartTime) - 1
	}
	return n
}

// DecodeDelta decodes a delta body, as AppendDelta writes it or as any other
// msgpack encoder may: the keys in any order, unknown keys skipped, flow ids
// integers or canonical decimal strings. The flows are appended to dst[:0]
// and returned sorted by ID; ids out of order or named twice are an error.
// A flow whose three fields are nil is returned with Has == 0. An invalid
// body returns an error wrapping ErrInvalidDelta.
func DecodeDelta(data []byte, dst []flowstate.Flow) (base uint64, flows []flowstate.Flow, err error) {
	flows = dst[:0]
	n, i, st := mapLenAt(data, 0)
	if st != ok {
		return 0, nil, deltaError("", st, codeAt(data, 0), "a map")
	}
	var seenBase, seenFlows bool
	for ; n > 0; n-- {
		name, j, st := strAt(data, i)
		if st != ok {
			return 0, nil, deltaError("", st, codeAt(data, i), "a string key")
		}
		i = j
		switch string(name) {
		case "base":
			if seenBase {
				return 0, nil, fmt.Errorf("%w: base named twice", ErrInvalidDelta)
			}
			seenBase = true
			v, neg, j, st := intAt(data, i)
			if st != ok || neg {
				return 0, nil, deltaError("base", st, codeAt(data, i), "a non-negative integer")
			}
			base, i = v, j
		case "flows":
			if seenFlows {
				return 0, nil, fmt.Errorf("%w: flows named twice", ErrInvalidDelta)
			}
			seenFlows = true
			if codeAt(data, i) == codeNil {
				i++
				continue
			}
			if flows, i, err = decodeDeltaFlows(data, i, flows); err != nil {
				return 0, nil, err
			}
		default:
			if i, st = skipAt(data, i, 2); st != ok {
				return 0, nil, deltaError(string(name), st, codeAt(data, i), "")
			}
		}
	}
	if i != len(data) {
		return 0, nil, fmt.Errorf("%w: %d trailing bytes", ErrInvalidDelta, len(data)-i)
	}
	if !seenBase {
		return 0, nil, fmt.Errorf("%w: no base", ErrInvalidDelta)
	}
	return base, flows, nil
}

// decodeDeltaFlows decodes the flows map at data[i:].
func decodeDeltaFlows(data []byte, i int, flows []flowstate.Flow) ([]flowstate.Flow, int, error) {
	n, i, st := mapLenAt(data, i)
	if st != ok {
		return nil, i, deltaError("flows", st, codeAt(data, i), "a map")
	}
	if n > uint64(len(data)-i)/5 { // an entry takes at least 5 bytes: id, array header, 3 nils
		return nil, i, fmt.Errorf("%w: flows claims %d entries in %d bytes", ErrInvalidDelta, n, len(data)-i)
	}
	for ; n > 0; n-- {
		id, j, derr := flowIDAt(data, i, "flows")
		if derr != nil {
			return nil, i, fmt.Errorf("%w: %s", ErrInvalidDelta, derr.Reason)
		}
		if k := len(flows); k > 0 && uint64(flows[k-1].ID) >= id {
			return nil, i, fmt.Errorf("%w: flow %d out of order or named twice", ErrInvalidDelta, id)
		}
		i = j
		f := flowstate.Flow{ID: flowstate.FlowID(id)}
		if c := codeAt(data, i); c != codeFixArray|3 && !(c == codeArray16 && len(data)-i >= 3 && data[i+1] == 0 && data[i+2] == 3) {
			return nil, i, fmt.Errorf("%w: flow %d: want an array of 3, got %s", ErrInvalidDelta, id, typeName(c))
		} else if c == codeArray16 {
			i += 3
		} else {
			i++
		}
		for k, bit := range [3]flowstate.Fields{flowstate.HasStateSize, flowstate.HasLastExecTime, flowstate.HasStartTime} {
			if codeAt(data, i) == codeNil && i < len(data) {
				i++
				continue
			}
			v, neg, j, st := intAt(data, i)
			switch {
			case st != ok:
				return nil, i, deltaError(fmt.Sprintf("flows[%d][%d]", id, k), st, codeAt(data, i), "an integer or nil")
			case k == 0 && neg:
				return nil, i, fmt.Errorf("%w: flow %d: negative state_size", ErrInvalidDelta, id)
			case k > 0 && !neg && v > math.MaxInt64:
				return nil, i, fmt.Errorf("%w: flow %d: time outside int64", ErrInvalidDelta, id)
			}
			i = j
			f.Has |= bit
			switch k {
			case 0:
				f.StateSize = v
			case 1:
				f.LastExecTime = int64(v)
			default:
				f.StartTime = int64(v)
			}
		}
		flows = append(flows, f)
	}
	return flows, i, nil
}

// deltaError turns a scan status into an error wrapping ErrInvalidDelta.
func deltaError(field string, st status, c byte, want string) error {
	where := ""
	if field != "" {
		where = field + ": "
	}
	switch st {
	case truncated:
		return fmt.Errorf("%w: %struncated", ErrInvalidDelta, where)
	case tooDeep:
		return fmt.Errorf("%w: %snested too deep", ErrInvalidDelta, where)
	case invalid:
		return fmt.Errorf("%w: %sthe reserved byte 0xc1", ErrInvalidDelta, where)
	}
	return fmt.Errorf("%w: %sgot %s, want %s", ErrInvalidDelta, where, typeName(c), want)
}
