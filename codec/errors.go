package codec

import (
	"errors"
	"strconv"
)

// ErrInvalidReport is wrapped by every error of Decoder.Decode.
var ErrInvalidReport = errors.New("codec: invalid report")

// ErrInvalidAggregate is wrapped by every error of DecodeAggregate.
var ErrInvalidAggregate = errors.New("codec: invalid aggregate")

// ErrInvalidStats is wrapped by every error of DecodeStats.
var ErrInvalidStats = errors.New("codec: invalid stats view")

// Kind is a short, stable code for why a body was rejected, fit for a
// metric label.
type Kind string

// The kinds of DecodeError. When a body breaks several rules, the error names
// one of them.
const (
	KindEmpty          Kind = "empty"           // the body has no bytes
	KindNotMsgpack     Kind = "not_msgpack"     // not valid msgpack: truncated, or the reserved byte 0xc1
	KindTrailingBytes  Kind = "trailing_bytes"  // bytes follow the top-level map
	KindBadType        Kind = "bad_type"        // not a map at the top, a field name that is not a string, a field or value of the wrong type
	KindMissingNodeID  Kind = "missing_node_id" // no node_id field
	KindDuplicateField Kind = "duplicate_field" // a field named twice
	KindBadFlowID      Kind = "bad_flow_id"     // a flow id that is not a uint32 integer or a canonical decimal string
	KindDuplicateFlow  Kind = "duplicate_flow"  // a map that names the same flow twice
	KindOutOfRange     Kind = "out_of_range"    // a negative node_id, node_epoch, seq, state size or row count; a time outside int64
	KindTooManyFlows   Kind = "too_many_flows"  // more distinct flow ids than Decoder.MaxFlows
	KindTooDeep        Kind = "too_deep"        // nested deeper than MaxDepth
	// KindBadError: an error of last_errors that breaks its rules: more
	// than flowstate.MaxFlowErrors for a flow, no time or no message, a
	// message empty, longer than flowstate.MaxErrorMessage bytes or not
	// valid UTF-8.
	KindBadError Kind = "bad_error"
	// KindTooManyUnknownFields: more unknown fields than
	// Decoder.MaxUnknownFields.
	KindTooManyUnknownFields Kind = "too_many_unknown_fields"
)

// DecodeError says why a body was rejected. It wraps ErrInvalidReport (or
// ErrInvalidAggregate, from DecodeAggregate, or ErrInvalidStats, from
// DecodeStats).
type DecodeError struct {
	// Field is where the problem is: a field name ("node_id"), a flow in a
	// map ("state_size[7]", with the key quoted when it is a string that is
	// not a valid id: `last_exec_time_map["07"]`), or "" for the body as a
	// whole. Received strings that are not short plain words are quoted and
	// cut to 40 bytes, so that an error is one short line.
	Field string
	// Kind is the class of the problem.
	Kind Kind
	// Reason says what is wrong, in a few words.
	Reason string

	body bodyKind // what was decoded
}

// Error returns one line: "codec: " and the field, if any, and the reason.
func (e *DecodeError) Error() string {
	if e.Field == "" {
		return "codec: " + e.Reason
	}
	return "codec: " + e.Field + ": " + e.Reason
}

// Unwrap returns ErrInvalidReport, or ErrInvalidAggregate for an error of
// DecodeAggregate, or ErrInvalidStats for one of DecodeStats.
func (e *DecodeError) Unwrap() error {
	switch e.body {
	case bodyAggregate:
		return ErrInvalidAggregate
	case bodyStats:
		return ErrInvalidStats
	}
	return ErrInvalidReport
}

func newError(field string, kind Kind, reason string) *DecodeError {
	return &DecodeError{Field: field, Kind: kind, Reason: reason}
}

// scanError turns a failed scan of the item that starts with code c into an
// error: wantType describes the type that was expected there.
func scanError(field string, st status, c byte, wantType string) *DecodeError {
	switch st {
	case truncated:
		return newError(field, KindNotMsgpack, "truncated")
	case tooDeep:
		return newError(field, KindTooDeep, "nested deeper than "+strconv.Itoa(MaxDepth)+" levels")
	case invalid:
		return newError(field, KindNotMsgpack, "reserved byte 0xc1")
	}
	if c == codeNeverUsed {
		return newError(field, KindNotMsgpack, "reserved byte 0xc1")
	}
	return newError(field, KindBadType, "is "+typeName(c)+", want "+wantType)
}

// flowPath is the Field of flow id in the map named field.
func flowPath(field string, id uint64) string {
	return field + "[" + strconv.FormatUint(id, 10) + "]"
}

// namePath is the Field of a field name as it was received: as is when it
// is a short plain word, quoted otherwise, so that an error stays one
// short line.
func namePath(name []byte) string {
	if len(name) == 0 || len(name) > maxQuoted {
		return quote(name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return quote(name)
		}
	}
	return string(name)
}

// maxQuoted is the most bytes of a received string that an error repeats.
const maxQuoted = 40

// quote quotes s, cut to maxQuoted bytes.
func quote(s []byte) string {
	if len(s) > maxQuoted {
		return strconv.Quote(string(s[:maxQuoted])) + "..."
	}
	return strconv.Quote(string(s))
}
