package codec

import (
	"math"
	"slices"
	"strconv"

	"github.com/flowstate-io/flowstate/flowstate"
)

// fieldBits are the Has bits of the three maps.
var fieldBits = [...]flowstate.Fields{
	fieldStateSize:    flowstate.HasStateSize,
	fieldLastExecTime: flowstate.HasLastExecTime,
	fieldStartTime:    flowstate.HasStartTime,
}

// flowMap reads one of the three maps at b[i:] into d.ents, after merging
// the map read before it into d.union.
func (d *Decoder) flowMap(b []byte, i int, f field) (int, *DecodeError) {
	name := fieldNames[f]
	n, present, i, err := fieldMap(b, i, name)
	if err != nil || !present {
		return i, err
	}
	if n == 0 {
		return i, nil
	}
	limit := uint64(max(d.MaxFlows, 0))
	if limit > 0 && n > limit {
		return i, newError(name, KindTooManyFlows, "map of "+strconv.FormatUint(n, 10)+" flows, limit "+strconv.Itoa(d.MaxFlows))
	}
	d.flush()
	// Every entry takes at least two bytes: never trust n further than that.
	ents := slices.Grow(d.ents[:0], int(min(n, uint64(len(b)-i)/2)))
	check := limit > 0 && uint64(len(d.union))+n > limit
	fresh := uint64(len(d.union))
	sorted := true
	isSize := f == fieldStateSize
	prev := int64(-1)
	for ; n > 0; n-- {
		id, j, fast := uintFast(b, i)
		if fast && id <= math.MaxUint32 {
			i = j
		} else {
			var err *DecodeError
			if id, i, err = flowIDAt(b, i, name); err != nil {
				return i, err
			}
		}
		v, j, fast := uintFast(b, i)
		if fast && (isSize || v <= math.MaxInt64) {
			i = j
		} else {
			var neg bool
			var st status
			if v, neg, j, st = intAt(b, i); st != ok {
				want := "an integer"
				if isSize {
					want = "an unsigned integer"
				}
				return i, scanError(flowPath(name, id), st, codeAt(b, i), want)
			}
			if isSize && neg {
				return i, newError(flowPath(name, id), KindOutOfRange, "negative size "+strconv.FormatInt(int64(v), 10))
			}
			if !isSize && !neg && v > math.MaxInt64 {
				return i, newError(flowPath(name, id), KindOutOfRange, "time "+strconv.FormatUint(v, 10)+" overflows int64")
			}
			i = j
		}
		if int64(id) <= prev {
			sorted = false
		}
		prev = int64(id)
		if check && !inUnion(d.union, flowstate.FlowID(id)) {
			if fresh++; fresh > limit {
				return i, newError(flowPath(name, id), KindTooManyFlows, "more than "+strconv.Itoa(d.MaxFlows)+" flows")
			}
		}
		ents = append(ents, entry{id: uint32(id), val: v})
	}
	if !sorted {
		ents, d.tmp = sortEntries(ents, d.tmp)
		for k := 1; k < len(ents); k++ {
			if ents[k].id == ents[k-1].id {
				d.ents = ents
				return i, newError(flowPath(name, uint64(ents[k].id)), KindDuplicateFlow, "named twice")
			}
		}
	}
	d.ents, d.entsBit = ents, fieldBits[f]
	return i, nil
}

// fieldMap reads the header of the map that is the value of field name: a
// nil is an absent map (present false), and anything else but a map an
// error.
func fieldMap(b []byte, i int, name string) (n uint64, present bool, next int, err *DecodeError) {
	if i < len(b) && b[i] == codeNil {
		return 0, false, i + 1, nil
	}
	n, next, st := mapLenAt(b, i)
	if st != ok {
		return 0, false, next, scanError(name, st, codeAt(b, i), "a map")
	}
	return n, true, next, nil
}

// mapFlowID reads the flow id key of an entry of the map named name.
func mapFlowID(b []byte, i int, name string) (uint64, int, *DecodeError) {
	if id, j, fast := uintFast(b, i); fast && id <= math.MaxUint32 {
		return id, j, nil
	}
	return flowIDAt(b, i, name)
}

// flowIDAt reads a flow id that is not a positive fixint: an integer in
// 0..2^32-1 in any encoding, or a canonical decimal string.
func flowIDAt(b []byte, i int, name string) (uint64, int, *DecodeError) {
	c := codeAt(b, i)
	if c&0xe0 == codeFixStr || c == codeStr8 || c == codeStr16 || c == codeStr32 {
		s, j, st := strAt(b, i)
		if st != ok {
			return 0, i, scanError(name, st, c, "")
		}
		id, valid := parseFlowID(s)
		if !valid {
			return 0, i, newError(name+"["+quote(s)+"]", KindBadFlowID, "not a uint32 in canonical decimal")
		}
		return id, j, nil
	}
	v, neg, j, st := intAt(b, i)
	switch {
	case st == wrongType && c != codeNeverUsed:
		return 0, i, newError(name, KindBadFlowID, "flow id is "+typeName(c)+", want an integer or a decimal string")
	case st != ok:
		return 0, i, scanError(name, st, c, "")
	case neg:
		return 0, i, newError(name+"["+strconv.FormatInt(int64(v), 10)+"]", KindBadFlowID, "negative flow id")
	case v > math.MaxUint32:
		return 0, i, newError(flowPath(name, v), KindBadFlowID, "flow id out of uint32 range")
	}
	return v, j, nil
}

// parseFlowID parses a flow id written as a string: decimal digits, no sign,
// no leading zero (but "0"), at most 2^32-1.
func parseFlowID(s []byte) (uint64, bool) {
	if len(s) == 0 || len(s) > 10 || s[0] == '0' && len(s) > 1 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, v <= math.MaxUint32
}
