package jetstream

import (
	"encoding/json"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// pubAckSeq returns the stream sequence that a put's reply acknowledges, or
// why the put was not stored: natsjs.ErrNoStreamResponse when no stream took
// it (the server's no-responders status), the server's *natsjs.APIError, or
// natsjs.ErrInvalidJSAck. A plain acknowledgement,
// {"stream":"KV_b","seq":N}, is read in place; anything else is decoded with
// encoding/json.
func pubAckSeq(m *nats.Msg) (uint64, error) {
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" {
			return 0, natsjs.ErrNoStreamResponse
		}
		return 0, natsjs.ErrInvalidJSAck
	}
	if seq, ok := scanPubAck(m.Data); ok {
		return seq, nil
	}
	var r struct {
		Error  *natsjs.APIError `json:"error"`
		Stream string           `json:"stream"`
		Seq    uint64           `json:"seq"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return 0, natsjs.ErrInvalidJSAck
	}
	if r.Error != nil {
		return 0, r.Error
	}
	if r.Stream == "" {
		return 0, natsjs.ErrInvalidJSAck
	}
	return r.Seq, nil
}

// scanPubAck reads a flat JSON object whose members are strings without
// escapes, unsigned integers and booleans, and returns its "seq" if it also
// has a non-empty "stream". It gives up (false) on anything else: an
// "error" member, an escape, a nested value, a number with a sign, fraction
// or exponent, a member named twice.
func scanPubAck(b []byte) (uint64, bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return 0, false
	}
	var seq uint64
	var haveSeq, haveStream bool
	for first := true; ; first = false {
		i = skipSpace(b, i+1)
		if i == len(b) {
			return 0, false
		}
		if first && b[i] == '}' {
			break
		}
		name, j, ok := scanString(b, i)
		if !ok {
			return 0, false
		}
		i = skipSpace(b, j)
		if i == len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipSpace(b, i+1)
		if i == len(b) {
			return 0, false
		}
		switch c := b[i]; {
		case c == '"':
			s, j, ok := scanString(b, i)
			if !ok {
				return 0, false
			}
			if string(name) == "stream" {
				if haveStream || len(s) == 0 {
					return 0, false
				}
				haveStream = true
			}
			i = j
		case c >= '0' && c <= '9':
			j := i
			var n uint64
			for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
				d := uint64(b[j] - '0')
				if n > (1<<64-1-d)/10 {
					return 0, false
				}
				n = n*10 + d
			}
			if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') || (b[i] == '0' && j-i > 1) {
				return 0, false
			}
			if string(name) == "seq" {
				if haveSeq {
					return 0, false
				}
				seq, haveSeq = n, true
			}
			i = j
		case hasPrefix(b[i:], "true"):
			i += len("true")
		case hasPrefix(b[i:], "false"):
			i += len("false")
		default:
			return 0, false
		}
		if string(name) == "error" {
			return 0, false
		}
		i = skipSpace(b, i)
		if i == len(b) {
			return 0, false
		}
		if b[i] == '}' {
			break
		}
		if b[i] != ',' {
			return 0, false
		}
	}
	if skipSpace(b, i+1) != len(b) {
		return 0, false
	}
	return seq, haveSeq && haveStream
}

// scanString returns the content of the string at b[i] (a quote) and the
// index past it; false if it holds an escape or a control character, or
// does not end.
func scanString(b []byte, i int) ([]byte, int, bool) {
	if b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }
