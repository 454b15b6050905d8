package codec

// The msgpack type codes (https://github.com/msgpack/msgpack/blob/master/spec.md).
// They are the values of msgpack/v5/msgpcode, which declares them as variables;
// constants let the compiler turn the switches below into jump tables.
const (
	codePosFixMax = 0x7f
	codeFixMap    = 0x80
	codeFixArray  = 0x90
	codeFixStr    = 0xa0
	codeNil       = 0xc0
	codeNeverUsed = 0xc1
	codeFalse     = 0xc2
	codeTrue      = 0xc3
	codeBin8      = 0xc4
	codeBin16     = 0xc5
	codeBin32     = 0xc6
	codeExt8      = 0xc7
	codeExt16     = 0xc8
	codeExt32     = 0xc9
	codeFloat32   = 0xca
	codeFloat64   = 0xcb
	codeUint8     = 0xcc
	codeUint16    = 0xcd
	codeUint32    = 0xce
	codeUint64    = 0xcf
	codeInt8      = 0xd0
	codeInt16     = 0xd1
	codeInt32     = 0xd2
	codeInt64     = 0xd3
	codeFixExt1   = 0xd4
	codeFixExt2   = 0xd5
	codeFixExt4   = 0xd6
	codeFixExt8   = 0xd7
	codeFixExt16  = 0xd8
	codeStr8      = 0xd9
	codeStr16     = 0xda
	codeStr32     = 0xdb
	codeArray16   = 0xdc
	codeArray32   = 0xdd
	codeMap16     = 0xde
	codeMap32     = 0xdf
	codeNegFixMin = 0xe0
)

// typeName names the msgpack type that code c starts, for error reasons.
func typeName(c byte) string {
	switch {
	case c <= codePosFixMax || c >= codeNegFixMin:
		return "an integer"
	case c < codeFixArray:
		return "a map"
	case c < codeFixStr:
		return "an array"
	case c < codeNil:
		return "a string"
	}
	switch c {
	case codeNil:
		return "nil"
	case codeFalse, codeTrue:
		return "a bool"
	case codeBin8, codeBin16, codeBin32:
		return "a binary"
	case codeExt8, codeExt16, codeExt32, codeFixExt1, codeFixExt2, codeFixExt4, codeFixExt8, codeFixExt16:
		return "an extension"
	case codeFloat32, codeFloat64:
		return "a float"
	case codeUint8, codeUint16, codeUint32, codeUint64, codeInt8, codeInt16, codeInt32, codeInt64:
		return "an integer"
	case codeStr8, codeStr16, codeStr32:
		return "a string"
	case codeArray16, codeArray32:
		return "an array"
	case codeMap16, codeMap32:
		return "a map"
	}
	return "the reserved byte 0xc1"
}
