package codec

import "github.com/flowstate-io/flowstate/flowstate"

// The appenders below write every integer in its shortest msgpack form, as
// msgpack/v5's Encoder.EncodeUint and EncodeInt do: a fixint when it fits,
// else uint8/16/32/64 for a non-negative value and int8/16/32/64 for a
// negative one.

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= codePosFixMax:
		return append(dst, byte(v))
	case v <= 0xff:
		return append(dst, codeUint8, byte(v))
	case v <= 0xffff:
		return append(dst, codeUint16, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return append(dst, codeUint32, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(dst, codeUint64, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
		byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= -1<<7:
		return append(dst, codeInt8, byte(v))
	case v >= -1<<15:
		return append(dst, codeInt16, byte(v>>8), byte(v))
	case v >= -1<<31:
		return append(dst, codeInt32, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(dst, codeInt64, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
		byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendMapLen(dst []byte, n int) []byte {
	return appendLen(dst, n, codeFixMap, codeMap16, codeMap32)
}

func appendArrayLen(dst []byte, n int) []byte {
	return appendLen(dst, n, codeFixArray, codeArray16, codeArray32)
}

// appendLen appends the header of a map or an array of n items, given its
// type's codes: fix (ORed with n up to 15), 16-bit and 32-bit.
func appendLen(dst []byte, n int, fix, c16, c32 byte) []byte {
	switch {
	case n <= 15:
		return append(dst, fix|byte(n))
	case n <= 0xffff:
		return append(dst, c16, byte(n>>8), byte(n))
	}
	return append(dst, c32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// appendName appends a field name, a string of at most 31 bytes.
func appendName(dst []byte, s string) []byte {
	return append(append(dst, codeFixStr|byte(len(s))), s...)
}

// appendFlowMaps appends the three maps of flows, sorted by ID, each after
// its field name, in the order state_size, last_exec_time_map,
// start_time_map.
func appendFlowMaps(dst []byte, flows []flowstate.Flow) []byte {
	var n [3]int
	for i := range flows {
		n = countFields(n, flows[i].Has)
	}
	dst = appendName(dst, "state_size")
	dst = appendMapLen(dst, n[0])
	for i := range flows {
		if f := &flows[i]; f.Has&flowstate.HasStateSize != 0 {
			dst = appendUint(appendUint(dst, uint64(f.ID)), f.StateSize)
		}
	}
	dst = appendName(dst, "last_exec_time_map")
	dst = appendMapLen(dst, n[1])
	for i := range flows {
		if f := &flows[i]; f.Has&flowstate.HasLastExecTime != 0 {
			dst = appendInt(appendUint(dst, uint64(f.ID)), f.LastExecTime)
		}
	}
	dst = appendName(dst, "start_time_map")
	dst = appendMapLen(dst, n[2])
	for i := range flows {
		if f := &flows[i]; f.Has&flowstate.HasStartTime != 0 {
			dst = appendInt(appendUint(dst, uint64(f.ID)), f.StartTime)
		}
	}
	return dst
}
