package flowstate

import "unicode/utf8"

// The strings and skipped values of AppendValueFlows, read as serde_json
// 1.0.149's SliceRead reads them.

// maxFieldName is the length of the longest field name, last_exec_time_map.
const maxFieldName = 18

// fieldName reads a struct field name at its opening quote, as serde_json's
// parse_str does (escapes decoded, UTF-16 surrogates paired, no control
// character, valid UTF-8), and says which field it names, if any.
func (d *valueDecoder) fieldName() (int, error) {
	d.pos++
	start := d.pos
	var name [maxFieldName]byte
	n := 0 // bytes of the decoded name; past maxFieldName, no field's
	add := func(c byte) {
		if n < maxFieldName {
			name[n] = c
		}
		n++
	}
	for {
		if d.pos >= len(d.data) {
			return 0, d.fail("EOF while parsing a string")
		}
		c := d.data[d.pos]
		switch {
		case c == '"':
			if !utf8.Valid(d.data[start:d.pos]) {
				// Escapes are ASCII, so the raw bytes are valid UTF-8
				// exactly when the decoded name is.
				return 0, d.fail("invalid unicode code point in a field name")
			}
			d.pos++
			if n <= maxFieldName {
				for f, want := range fieldNames {
					if string(name[:n]) == want {
						return f, nil
					}
				}
			}
			return fieldUnknown, nil
		case c < 0x20:
			return 0, d.fail("control character while parsing a string")
		case c == '\\':
			d.pos++
			r, err := d.escape()
			if err != nil {
				return 0, err
			}
			if r < utf8.RuneSelf {
				add(byte(r))
			} else {
				n = maxFieldName + 1 // no field name has one
			}
		default:
			add(c)
			d.pos++
		}
	}
}

// escape decodes an escape after its backslash, with serde_json's checks
// for a string (parse_escape with validate): a high surrogate must be
// followed by an escaped low surrogate, and a lone low surrogate is an
// error.
func (d *valueDecoder) escape() (rune, error) {
	if d.pos >= len(d.data) {
		return 0, d.fail("EOF while parsing a string")
	}
	c := d.data[d.pos]
	d.pos++
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
	default:
		return 0, d.fail("invalid escape")
	}
	n1, err := d.hex4()
	if err != nil {
		return 0, err
	}
	switch {
	case n1 >= 0xDC00 && n1 <= 0xDFFF:
		return 0, d.fail("lone leading surrogate in hex escape")
	case n1 < 0xD800 || n1 > 0xDBFF:
		return rune(n1), nil
	}
	if d.pos+1 >= len(d.data) || d.data[d.pos] != '\\' || d.data[d.pos+1] != 'u' {
		return 0, d.fail("unexpected end of hex escape")
	}
	d.pos += 2
	n2, err := d.hex4()
	if err != nil {
		return 0, err
	}
	if n2 < 0xDC00 || n2 > 0xDFFF {
		return 0, d.fail("lone leading surrogate in hex escape")
	}
	return rune((n1-0xD800)<<10|(n2-0xDC00)) + 0x10000, nil
}

// hex4 reads the four hex digits of a \u escape.
func (d *valueDecoder) hex4() (uint32, error) {
	if d.pos+4 > len(d.data) {
		return 0, d.fail("EOF while parsing a string")
	}
	var n uint32
	for _, c := range d.data[d.pos : d.pos+4] {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, d.fail("invalid escape")
		}
		n = n<<4 | uint32(v)
		d.pos++
	}
	return n, nil
}

// skipString skips a string at its opening quote as serde_json's
// ignore_str does: escapes are checked for form only (any \uXXXX) and the
// bytes are not checked for UTF-8; a control character is an error.
func (d *valueDecoder) skipString() error {
	d.pos++
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		d.pos++
		switch {
		case c == '"':
			return nil
		case c < 0x20:
			return d.fail("control character while parsing a string")
		case c != '\\':
		case d.pos >= len(d.data):
			return d.fail("EOF while parsing a string")
		default:
			e := d.data[d.pos]
			d.pos++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if _, err := d.hex4(); err != nil {
					return err
				}
			default:
				return d.fail("invalid escape")
			}
		}
	}
	return d.fail("EOF while parsing a string")
}

// skipNumber skips a JSON number as serde_json's ignore_integer does: any
// magnitude, fraction and exponent.
func (d *valueDecoder) skipNumber() error {
	if d.data[d.pos] == '-' {
		d.pos++
	}
	digits := func() int {
		n := 0
		for d.pos < len(d.data) && isDigit(d.data[d.pos]) {
			d.pos++
			n++
		}
		return n
	}
	switch {
	case d.pos >= len(d.data) || !isDigit(d.data[d.pos]):
		return d.fail("invalid number")
	case d.data[d.pos] == '0':
		d.pos++
		if d.pos < len(d.data) && isDigit(d.data[d.pos]) {
			return d.fail("invalid number")
		}
	default:
		digits()
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return d.fail("invalid number")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return d.fail("invalid number")
		}
	}
	return nil
}

// skipLiteral skips null, true or false.
func (d *valueDecoder) skipLiteral(word string) error {
	if len(d.data)-d.pos < len(word) || string(d.data[d.pos:d.pos+len(word)]) != word {
		return d.fail("expected " + word)
	}
	d.pos += len(word)
	return nil
}

// skipValue skips any JSON value, after whitespace, as serde_json's
// ignore_value does for a field that the struct does not have: with no
// limit on nesting. open holds one bit per open container, set for an
// object; past the 512 levels of its first words it grows on the heap.
func (d *valueDecoder) skipValue() error {
	var words [8]uint64
	open := words[:]
	depth := 0
	for {
		// A value is expected here.
		var err error
		switch c := d.ws(); c {
		case '{', '[':
			d.pos++
			if depth == len(open)*64 {
				open = append(open, 0)
			}
			if c == '{' {
				open[depth/64] |= 1 << (depth % 64)
			} else {
				open[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			if d.ws() != c+2 { // '{'+2 is '}', '['+2 is ']'
				if c == '{' {
					err = d.skipKey()
				}
				if err != nil {
					return err
				}
				continue
			}
			// Empty: closed below.
		case '"':
			err = d.skipString()
		case 'n':
			err = d.skipLiteral("null")
		case 't':
			err = d.skipLiteral("true")
		case 'f':
			err = d.skipLiteral("false")
		case 0:
			if d.pos >= len(d.data) {
				return d.fail("EOF while parsing a value")
			}
			return d.fail("expected value")
		default:
			if c != '-' && !isDigit(c) {
				return d.fail("expected value")
			}
			err = d.skipNumber()
		}
		if err != nil {
			return err
		}
		// A value ended: close what it ends, or go on to the next one.
		for next := false; !next; {
			if depth == 0 {
				return nil
			}
			object := open[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			switch c := d.ws(); {
			case c == '}' && object, c == ']' && !object:
				// Either the empty container just opened (its first value
				// is this closing byte), or the end of one with values.
				d.pos++
				depth--
			case c == ',':
				d.pos++
				if object {
					if err := d.skipKey(); err != nil {
						return err
					}
				}
				next = true
			case c == 0 && d.pos >= len(d.data):
				return d.fail("EOF while parsing a list or an object")
			case object:
				return d.fail("expected ',' or '}'")
			default:
				return d.fail("expected ',' or ']'")
			}
		}
	}
}

// skipKey skips an object key in a skipped value and its colon.
func (d *valueDecoder) skipKey() error {
	if d.ws() != '"' {
		return d.fail("key must be a string")
	}
	if err := d.skipString(); err != nil {
		return err
	}
	if d.ws() != ':' {
		return d.fail("expected ':'")
	}
	d.pos++
	return nil
}
