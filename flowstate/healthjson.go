package flowstate

import "strconv"

// AppendNodeJSON appends the stored form of a node's value to dst
// (PROTOCOL.md, state store layout). Without a v3 report field (h.IsV3
// false) and without retired epochs it is AppendJSON's, byte for byte.
// Otherwise it is that object followed by processed_rows and last_errors
// (flow ids as strings, each error as {"time":...,"message":"..."}),
// node_epoch, seq and retired_epochs (oldest first), each only when
// present, seq only with a node_epoch, retired_epochs only when not empty,
// e.g.
// {"state_size":{"1":1024},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{"1":52000},"node_epoch":1700000000000,"seq":41}.
// Messages are escaped as serde_json escapes a string.
func AppendNodeJSON(dst []byte, flows []Flow, nodeEpoch uint64, hasEpoch bool, h *Health) []byte {
	dst = AppendJSON(dst, flows)
	if !h.IsV3() && (h == nil || len(h.RetiredEpochs) == 0) {
		return dst
	}
	dst = dst[:len(dst)-1] // the closing '}'
	if h.HasProcessedRows {
		dst = append(dst, `,"processed_rows":{`...)
		first := true
		for i := range h.Flows {
			f := &h.Flows[i]
			if f.Has&HasProcessedRows != 0 {
				dst = appendKey(dst, f.ID, first)
				dst = strconv.AppendUint(dst, f.ProcessedRows, 10)
				first = false
			}
		}
		dst = append(dst, '}')
	}
	if h.HasLastErrors {
		dst = append(dst, `,"last_errors":{`...)
		first := true
		for i := range h.Flows {
			f := &h.Flows[i]
			if f.Has&HasLastErrors != 0 {
				dst = appendKey(dst, f.ID, first)
				dst = append(dst, '[')
				for k, e := range f.LastErrors {
					if k > 0 {
						dst = append(dst, ',')
					}
					dst = appendErrorJSON(dst, e.Time, nil, e.Message)
				}
				dst = append(dst, ']')
				first = false
			}
		}
		dst = append(dst, '}')
	}
	if hasEpoch {
		dst = append(dst, `,"node_epoch":`...)
		dst = strconv.AppendUint(dst, nodeEpoch, 10)
	}
	if h.HasSeq && hasEpoch {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, h.Seq, 10)
	}
	if len(h.RetiredEpochs) > 0 {
		dst = append(dst, `,"retired_epochs":[`...)
		for k, e := range h.RetiredEpochs {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, e, 10)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendErrorJSON appends an error object: {"time":..,"message":".."}, or
// with node_id between them when node is not nil (the stats view's form).
func appendErrorJSON(dst []byte, time int64, node *uint64, message string) []byte {
	dst = append(dst, `{"time":`...)
	dst = strconv.AppendInt(dst, time, 10)
	if node != nil {
		dst = append(dst, `,"node_id":`...)
		dst = strconv.AppendUint(dst, *node, 10)
	}
	dst = append(dst, `,"message":`...)
	dst = AppendJSONString(dst, message)
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string, escaped exactly as serde_json
// escapes it: '"' and '\\' with a backslash, \b \f \n \r \t in their short
// forms, other bytes below 0x20 as \u00xx (lower-case hex); '/', DEL and
// non-ASCII as they are. s should be valid UTF-8.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// JSONStringLen is the length of AppendJSONString's encoding of s, quotes
// included, without encoding it.
func JSONStringLen(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 0x20 && c != '"' && c != '\\':
		case c == '"', c == '\\', c == '\b', c == '\f', c == '\n', c == '\r', c == '\t':
			n++
		default:
			n += 5 // \u00xx
		}
	}
	return n
}
