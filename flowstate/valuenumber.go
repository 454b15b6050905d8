package flowstate

import "math"

// The numbers of a stored value as serde_json reads them: flow id map keys
// (u32) and integer values (usize state sizes, i64 times).

// flowID reads a flow id map key, after its opening quote, as serde_json
// reads a u32 map key: its number parser runs on the bytes between the
// quotes, which must start with a digit or '-' and end at the number. So the
// key is a JSON integer (a negative one, -0 or a float fails the u32), with
// no escape and no whitespace.
func (d *valueDecoder) flowID() (FlowID, error) {
	if d.pos >= len(d.data) || !isDigit(d.data[d.pos]) {
		return 0, d.fail("expected a flow id (a decimal u32) as map key")
	}
	mag, _, err := d.integer()
	if err != nil {
		return 0, err
	}
	if mag > math.MaxUint32 {
		return 0, d.fail("flow id out of the range of u32")
	}
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		return 0, d.fail("expected '\"' after the flow id")
	}
	d.pos++
	return FlowID(mag), nil
}

// integer reads a JSON number that serde_json parses as an integer:
// -?(0|[1-9][0-9]*), returned as its magnitude and sign. A number with a
// fraction or an exponent, -0 and a magnitude past uint64 are floats to
// serde_json (its parse_number), which no integer field accepts.
func (d *valueDecoder) integer() (mag uint64, neg bool, err error) {
	data, i := d.data, d.pos
	if i < len(data) && data[i] == '-' {
		neg = true
		i++
	}
	start := i
	for ; i < len(data); i++ {
		digit := data[i] - '0'
		if digit > 9 {
			break
		}
		mag = mag*10 + uint64(digit) // wraps past 19 digits: checked below
	}
	n := i - start
	d.pos = i
	switch {
	case n == 0 && neg:
		return 0, false, d.fail("invalid number")
	case n == 0:
		return 0, false, d.fail("expected an integer")
	case data[start] == '0' && n > 1:
		return 0, false, d.fail("invalid number (leading zero)")
	case n > len(maxUint64Digits),
		n == len(maxUint64Digits) && string(data[start:i]) > maxUint64Digits:
		return 0, false, d.fail("integer past u64 (a float to serde_json)")
	case neg && mag == 0:
		return 0, false, d.fail("-0 is a float to serde_json")
	}
	if i < len(data) {
		switch data[i] {
		case '.', 'e', 'E':
			return 0, false, d.fail("a float where an integer is expected")
		}
	}
	return mag, neg, nil
}

// maxUint64Digits is math.MaxUint64 in decimal: a number of as many digits
// fits in a uint64 when it compares lower or equal as a string.
const maxUint64Digits = "18446744073709551615"

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// signed returns the two's complement bits of mag, negated when neg.
func signed(mag uint64, neg bool) uint64 {
	if neg {
		return -mag
	}
	return mag
}
