package codec

import "encoding/binary"

// The scanners below read one msgpack item at b[i:] and return the index
// after it. They never allocate, never trust a length before checking it
// against the bytes left, and report what went wrong as a status for the
// caller to turn into a *DecodeError with the right field.

// status is the outcome of a scan.
type status uint8

const (
	ok        status = iota
	truncated        // the input ends inside the item
	wrongType        // the item is not of the wanted type (b[i] says what it is)
	tooDeep          // a container nests deeper than MaxDepth
	invalid          // the reserved byte 0xc1 where an item starts
)

// intAt reads an integer in any of msgpack's encodings. A negative value is
// returned as its two's complement bits with neg set.
func intAt(b []byte, i int) (v uint64, neg bool, next int, st status) {
	if i >= len(b) {
		return 0, false, i, truncated
	}
	c := b[i]
	if c <= codePosFixMax {
		return uint64(c), false, i + 1, ok
	}
	if c >= codeNegFixMin {
		return uint64(int64(int8(c))), true, i + 1, ok
	}
	p := b[i+1:]
	switch c {
	case codeUint8:
		if len(p) < 1 {
			break
		}
		return uint64(p[0]), false, i + 2, ok
	case codeUint16:
		if len(p) < 2 {
			break
		}
		return uint64(binary.BigEndian.Uint16(p)), false, i + 3, ok
	case codeUint32:
		if len(p) < 4 {
			break
		}
		return uint64(binary.BigEndian.Uint32(p)), false, i + 5, ok
	case codeUint64:
		if len(p) < 8 {
			break
		}
		return binary.BigEndian.Uint64(p), false, i + 9, ok
	case codeInt8:
		if len(p) < 1 {
			break
		}
		s := int64(int8(p[0]))
		return uint64(s), s < 0, i + 2, ok
	case codeInt16:
		if len(p) < 2 {
			break
		}
		s := int64(int16(binary.BigEndian.Uint16(p)))
		return uint64(s), s < 0, i + 3, ok
	case codeInt32:
		if len(p) < 4 {
			break
		}
		s := int64(int32(binary.BigEndian.Uint32(p)))
		return uint64(s), s < 0, i + 5, ok
	case codeInt64:
		if len(p) < 8 {
			break
		}
		s := int64(binary.BigEndian.Uint64(p))
		return uint64(s), s < 0, i + 9, ok
	default:
		return 0, false, i, wrongType
	}
	return 0, false, i, truncated
}

// uintFast reads the forms that flow ids, sizes and times mostly take, a
// positive fixint or uint8/16/32/64, when at least 9 bytes are left; it is
// small enough to be inlined. When it returns false, intAt knows the rest.
func uintFast(b []byte, i int) (v uint64, next int, ok bool) {
	if i < 0 || len(b)-i < 9 {
		return 0, i, false
	}
	c := b[i]
	if c <= codePosFixMax {
		return uint64(c), i + 1, true
	}
	if n := c - codeUint8; n < 4 {
		size := 1 << n // 1, 2, 4 or 8 bytes
		return binary.BigEndian.Uint64(b[i+1:]) >> (64 - 8*size), i + 1 + size, true
	}
	return 0, i, false
}

// mapLenAt reads a map header and returns the number of entries it claims.
func mapLenAt(b []byte, i int) (n uint64, next int, st status) {
	return lenAt(b, i, codeFixMap, codeMap16, codeMap32)
}

// lenAt reads the header of a map or an array, whose fix, 16-bit and
// 32-bit codes are fix, c16 and c32, and returns the count it claims.
func lenAt(b []byte, i int, fix, c16, c32 byte) (n uint64, next int, st status) {
	if i >= len(b) {
		return 0, i, truncated
	}
	c := b[i]
	switch {
	case c&0xf0 == fix:
		return uint64(c & 0x0f), i + 1, ok
	case c == c16:
		if len(b)-i < 3 {
			return 0, i, truncated
		}
		return uint64(binary.BigEndian.Uint16(b[i+1:])), i + 3, ok
	case c == c32:
		if len(b)-i < 5 {
			return 0, i, truncated
		}
		return uint64(binary.BigEndian.Uint32(b[i+1:])), i + 5, ok
	}
	return 0, i, wrongType
}

// strAt reads a string and returns its bytes, a subslice of b.
func strAt(b []byte, i int) (s []byte, next int, st status) {
	if i >= len(b) {
		return nil, i, truncated
	}
	c := b[i]
	var n uint64
	j := i + 1
	switch {
	case c&0xe0 == codeFixStr:
		n = uint64(c & 0x1f)
	case c == codeStr8:
		if len(b)-i < 2 {
			return nil, i, truncated
		}
		n, j = uint64(b[i+1]), i+2
	case c == codeStr16:
		if len(b)-i < 3 {
			return nil, i, truncated
		}
		n, j = uint64(binary.BigEndian.Uint16(b[i+1:])), i+3
	case c == codeStr32:
		if len(b)-i < 5 {
			return nil, i, truncated
		}
		n, j = uint64(binary.BigEndian.Uint32(b[i+1:])), i+5
	default:
		return nil, i, wrongType
	}
	if n > uint64(len(b)-j) {
		return nil, i, truncated
	}
	return b[j : j+int(n)], j + int(n), ok
}

// skipAt skips one item of any type. level is the nesting level that a
// container starting at b[i] would have; containers deeper than MaxDepth
// are refused.
func skipAt(b []byte, i, level int) (next int, st status) {
	if i >= len(b) {
		return i, truncated
	}
	c := b[i]
	var (
		hdr       int    // bytes of header, code included
		size      uint64 // bytes of payload after the header
		items     uint64 // items that follow, for a container
		container bool
	)
	switch {
	case c <= codePosFixMax || c >= codeNegFixMin:
		return i + 1, ok
	case c < codeFixArray:
		hdr, items, container = 1, 2*uint64(c&0x0f), true
	case c < codeFixStr:
		hdr, items, container = 1, uint64(c&0x0f), true
	case c < codeNil:
		hdr, size = 1, uint64(c&0x1f)
	default:
		switch c {
		case codeNil, codeFalse, codeTrue:
			return i + 1, ok
		case codeNeverUsed:
			return i, invalid
		case codeUint8, codeInt8:
			hdr = 2
		case codeUint16, codeInt16:
			hdr = 3
		case codeUint32, codeInt32, codeFloat32:
			hdr = 5
		case codeUint64, codeInt64, codeFloat64:
			hdr = 9
		case codeFixExt1, codeFixExt2, codeFixExt4, codeFixExt8, codeFixExt16:
			hdr, size = 2, 1<<(c-codeFixExt1)
		case codeBin8, codeStr8, codeExt8:
			if len(b)-i < 2 {
				return i, truncated
			}
			hdr, size = 2, uint64(b[i+1])
		case codeBin16, codeStr16, codeExt16, codeArray16, codeMap16:
			if len(b)-i < 3 {
				return i, truncated
			}
			hdr, size = 3, uint64(binary.BigEndian.Uint16(b[i+1:]))
		case codeBin32, codeStr32, codeExt32, codeArray32, codeMap32:
			if len(b)-i < 5 {
				return i, truncated
			}
			hdr, size = 5, uint64(binary.BigEndian.Uint32(b[i+1:]))
		}
		switch c {
		case codeExt8, codeExt16, codeExt32:
			hdr++ // the extension's type byte
		case codeArray16, codeArray32:
			items, size, container = size, 0, true
		case codeMap16, codeMap32:
			items, size, container = 2*size, 0, true
		}
	}
	if container && level > MaxDepth {
		return i, tooDeep
	}
	if uint64(hdr)+size > uint64(len(b)-i) {
		return i, truncated
	}
	j := i + hdr + int(size)
	for ; items > 0; items-- {
		if j, st = skipAt(b, j, level+1); st != ok {
			return j, st
		}
	}
	return j, ok
}

// codeAt returns the code at b[i], or 0 past the end.
func codeAt(b []byte, i int) byte {
	if i < len(b) {
		return b[i]
	}
	return 0
}
