package flowstate

import (
	"math"
	"slices"
	"strconv"
)

// AppendValueFlows decodes the stored (serde_json) form of a value and
// appends its flows to dst, sorted by ID, each ID once, joined across the
// three maps. It accepts exactly what GreptimeDB's try_from_raw_value
// (serde_json 1.0.149's from_slice into serde's derive of FlowStateValue:
// BTreeMap<u32, usize> state_size and BTreeMap<u32, i64>
// last_exec_time_map, #[serde(default)] start_time_map) accepts, and
// decodes it to the same value:
//
//   - the value is an object with the three fields, or (serde's derive
//     also reads a struct from a sequence) an array of two or three maps in
//     field order; whitespace (space, tab, CR, LF) is allowed between tokens
//     and after the value, nothing else after it;
//   - a field name matches after unescaping and is valid UTF-8; a field
//     named twice is an error; start_time_map may be absent; other fields
//     are skipped whatever their JSON value, at any depth (serde_json skips
//     without a recursion limit and does not check UTF-8 in skipped strings);
//   - each field is a map ({...}, not null); a flow id key is a decimal
//     uint32 written plainly between the quotes: no sign, no leading zero, no
//     escape, no space, no fraction or exponent; a flow id given twice in one
//     map keeps its last value;
//   - state sizes are JSON integers in uint64 and times in int64: no
//     fraction, no exponent, no -0 (serde_json reads -0 as a float), no
//     quotes.
//
// DecodeValue (encoding/json) is laxer: it takes the last of a field named
// twice, -0 for a time, an escaped flow id and invalid UTF-8 in a field name;
// it refuses the sequence form and skipped values nested past 10,000.
//
// dst's spare capacity holds the flows: one per flow when the maps list
// their ids in ascending order (as AppendJSON writes them), up to one per
// map entry otherwise. It allocates nothing when that capacity is there
// (and skipped values nest less than 512 deep). On error it returns dst with
// its length unchanged and an error that wraps ErrInvalidValue.
func AppendValueFlows(dst []Flow, data []byte) ([]Flow, error) {
	d := valueDecoder{data: data}
	out, err := d.decode(dst)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// The fields of FlowStateValue, in declared order: Fields(1)<<f is the
// Fields bit of field f.
const (
	fieldStateSize = iota
	fieldLastExecTime
	fieldStartTime
	fieldUnknown
)

var fieldNames = [...]string{"state_size", "last_exec_time_map", "start_time_map"}

// valueError is a value that does not decode: why, and where.
type valueError struct {
	offset int // -1: not known
	reason string
}

func (e *valueError) Error() string {
	if e.offset < 0 {
		return ErrInvalidValue.Error() + ": " + e.reason
	}
	return ErrInvalidValue.Error() + ": " + e.reason + " at byte " + strconv.Itoa(e.offset)
}

func (e *valueError) Unwrap() error { return ErrInvalidValue }

// valueDecoder reads one value from data, pos being the next byte to read.
type valueDecoder struct {
	data []byte
	pos  int
}

// flowJoin tracks how the flows appended so far are laid out in dst.
type flowJoin struct {
	base int // index in dst of the value's first flow
	// runEnd ends the first non-empty map's entries (dst[base:runEnd]),
	// or is base before it. Later maps merge into that run while their
	// ids ascend through it, and append entries of their own otherwise.
	runEnd int
	// sorted says that dst[base:] is sorted by ID, each ID once: no sort
	// and no merge are needed at the end.
	sorted bool
}

func (d *valueDecoder) fail(reason string) error {
	return &valueError{offset: d.pos, reason: reason}
}

// ws skips JSON whitespace and returns the next byte, or 0 at the end.
func (d *valueDecoder) ws() byte {
	for d.pos < len(d.data) {
		switch c := d.data[d.pos]; c {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return c
		}
	}
	return 0
}

func (d *valueDecoder) decode(dst []Flow) ([]Flow, error) {
	j := flowJoin{base: len(dst), runEnd: len(dst), sorted: true}
	var err error
	switch d.ws() {
	case '{':
		dst, err = d.object(dst, &j)
	case '[':
		dst, err = d.sequence(dst, &j)
	default:
		err = d.fail("expected struct FlowStateValue")
	}
	if err != nil {
		return nil, err
	}
	if d.ws(); d.pos != len(d.data) {
		return nil, d.fail("trailing characters")
	}
	if !j.sorted {
		dst = joinFlows(dst, j.base)
	}
	return dst, nil
}

// object reads the struct from a JSON object, at its '{'.
func (d *valueDecoder) object(dst []Flow, j *flowJoin) ([]Flow, error) {
	d.pos++
	var seen Fields
	c := d.ws()
	for c != '}' {
		if c != '"' {
			return nil, d.fail("key must be a string")
		}
		field, err := d.fieldName()
		if err != nil {
			return nil, err
		}
		if d.ws() != ':' {
			return nil, d.fail("expected ':'")
		}
		d.pos++
		if field == fieldUnknown {
			err = d.skipValue()
		} else {
			bit := Fields(1) << field
			if seen&bit != 0 {
				return nil, d.fail("duplicate field " + fieldNames[field])
			}
			seen |= bit
			dst, err = d.flowMap(dst, j, field)
		}
		if err != nil {
			return nil, err
		}
		if c, err = d.nextMember(); err != nil {
			return nil, err
		}
	}
	d.pos++
	for field := range fieldStartTime { // start_time_map is #[serde(default)]
		if seen&(Fields(1)<<field) == 0 {
			return nil, d.fail("missing field " + fieldNames[field])
		}
	}
	return dst, nil
}

// sequence reads the struct from a JSON array of its fields in declared
// order, at its '[', as serde's derive does: two or three maps.
func (d *valueDecoder) sequence(dst []Flow, j *flowJoin) ([]Flow, error) {
	d.pos++
	n := 0
	for ; n < len(fieldNames); n++ {
		c := d.ws()
		if c == ']' {
			break
		}
		if n > 0 {
			if c != ',' {
				return nil, d.fail("expected ',' or ']'")
			}
			d.pos++
			if d.ws() == ']' {
				return nil, d.fail("trailing comma")
			}
		}
		var err error
		if dst, err = d.flowMap(dst, j, n); err != nil {
			return nil, err
		}
	}
	if n < fieldStartTime {
		return nil, d.fail("invalid length " + strconv.Itoa(n) + ", expected struct FlowStateValue with 3 elements")
	}
	if d.ws() != ']' {
		return nil, d.fail("trailing characters in the sequence")
	}
	d.pos++
	return dst, nil
}

// flowMap reads one of the three maps (field) into dst, after whitespace.
func (d *valueDecoder) flowMap(dst []Flow, j *flowJoin, field int) ([]Flow, error) {
	if d.ws() != '{' {
		return nil, d.fail("expected a map for " + fieldNames[field])
	}
	d.pos++
	bit := Fields(1) << field
	first := j.runEnd == j.base
	merging := !first && j.sorted
	cursor := j.base
	c := d.ws()
	for c != '}' {
		if c != '"' {
			return nil, d.fail("key must be a string")
		}
		d.pos++
		id, err := d.flowID()
		if err != nil {
			return nil, err
		}
		if d.ws() != ':' {
			return nil, d.fail("expected ':'")
		}
		d.pos++
		d.ws()
		mag, neg, err := d.integer()
		if err != nil {
			return nil, err
		}
		f := Flow{ID: id, Has: bit}
		switch {
		case field == fieldStateSize && neg:
			return nil, d.fail("negative state_size")
		case field == fieldStateSize:
			f.StateSize = mag
		case !neg && mag > math.MaxInt64, neg && mag > 1<<63:
			return nil, d.fail(fieldNames[field] + " out of the range of i64")
		case field == fieldLastExecTime:
			f.LastExecTime = int64(signed(mag, neg))
		default:
			f.StartTime = int64(signed(mag, neg))
		}
		switch {
		case first:
			if n := len(dst); n > j.base && dst[n-1].ID >= id {
				j.sorted = false
			}
			dst = append(dst, f)
		case merging:
			for cursor < j.runEnd && dst[cursor].ID < id {
				cursor++
			}
			if cursor < j.runEnd && dst[cursor].ID == id {
				setField(&dst[cursor], &f)
				cursor++
				break
			}
			// An id the first map lacks, or out of order: this map's
			// entries go after the others from here on, and the last of
			// an id's entries wins once they are sorted.
			merging, j.sorted = false, false
			dst = append(dst, f)
		default:
			j.sorted = false
			dst = append(dst, f)
		}
		if c, err = d.nextMember(); err != nil {
			return nil, err
		}
	}
	d.pos++
	if first {
		j.runEnd = len(dst)
	}
	return dst, nil
}

// nextMember reads what follows a member of an object: a ',' and the
// first byte of the next key, or the closing '}', which it returns unread.
func (d *valueDecoder) nextMember() (byte, error) {
	switch c := d.ws(); c {
	case ',':
		d.pos++
		if c = d.ws(); c == '}' {
			return 0, d.fail("trailing comma")
		}
		return c, nil
	case '}':
		return c, nil
	}
	return 0, d.fail("expected ',' or '}'")
}

// setField copies the fields present in src into f.
func setField(f, src *Flow) {
	f.Has |= src.Has
	if src.Has&HasStateSize != 0 {
		f.StateSize = src.StateSize
	}
	if src.Has&HasLastExecTime != 0 {
		f.LastExecTime = src.LastExecTime
	}
	if src.Has&HasStartTime != 0 {
		f.StartTime = src.StartTime
	}
}

// joinFlows sorts dst[base:] by ID, keeping the order of equal IDs, and
// merges the entries of one ID into one, later entries winning.
func joinFlows(dst []Flow, base int) []Flow {
	slices.SortStableFunc(dst[base:], func(a, b Flow) int { return cmpID(a.ID, b.ID) })
	w := base
	for r := base; r < len(dst); r++ {
		if w > base && dst[w-1].ID == dst[r].ID {
			setField(&dst[w-1], &dst[r])
			continue
		}
		dst[w] = dst[r]
		w++
	}
	return dst[:w]
}
