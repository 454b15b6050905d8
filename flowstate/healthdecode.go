package flowstate

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// v3Names are the fields of a stored value's v3 part.
var v3Names = [...]string{"processed_rows", "last_errors", "node_epoch", "seq", "retired_epochs"}

// DecodeNodeHealth reads the v3 part of a node's stored value (as
// AppendNodeJSON writes it) into h, reusing its capacity, and returns its
// node_epoch. data should already be a valid value (AppendValueFlows); this
// reads only the v3 fields and checks them by the rules of a report's v3
// fields: flow ids canonical decimal uint32 strings, each once per map;
// processed_rows uint64; at most MaxFlowErrors errors per flow, each an
// object with an int64 "time" and a "message" of 1 to MaxErrorMessage bytes
// of valid UTF-8 (other keys ignored); node_epoch and seq uint64; at most
// MaxRetiredEpochs retired epochs. A field that is null is absent, as in a
// report. A value without any of these fields costs one scan for their
// names (and escapes) and leaves h empty. Any break returns an error wrapping
// ErrInvalidValue, and h empty.
//
// It reads with encoding/json, and refuses what serde_json would: a field
// named twice, an escaped lone surrogate in a message. It refuses too what
// no report could carry: a null error list, a seq without node_epoch, a
// retired epoch twice or equal to the value's node_epoch.
func DecodeNodeHealth(data []byte, h *Health) (nodeEpoch uint64, hasEpoch bool, err error) {
	h.Reset()
	// A field name may be written with escapes: then read the value whole.
	found := bytes.Contains(data, []byte(`\u`))
	for _, name := range v3Names {
		if bytes.Contains(data, []byte(name)) {
			found = true
			break
		}
	}
	if !found {
		return 0, false, nil
	}
	nodeEpoch, hasEpoch, err = decodeNodeHealth(data, h)
	if err != nil {
		h.Reset()
		return 0, false, err
	}
	return nodeEpoch, hasEpoch, nil
}

func healthError(reason string) error {
	return &valueError{offset: -1, reason: reason}
}

func decodeNodeHealth(data []byte, h *Health) (uint64, bool, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return 0, false, healthError("not an object: " + err.Error())
	}
	// encoding/json keeps the last of a field named twice: count them, as
	// serde_json refuses one.
	if n, err := countKeys(data); err != nil || n != len(fields) {
		return 0, false, healthError("a field named twice")
	}
	present := func(name string) (json.RawMessage, bool) {
		raw, ok := fields[name]
		return raw, ok && string(raw) != "null"
	}
	var epoch uint64
	var hasEpoch bool
	if raw, ok := present("node_epoch"); ok {
		v, err := strconv.ParseUint(string(raw), 10, 64)
		if err != nil {
			return 0, false, healthError("node_epoch is not a uint64")
		}
		epoch, hasEpoch = v, true
	}
	if raw, ok := present("seq"); ok {
		v, err := strconv.ParseUint(string(raw), 10, 64)
		if err != nil {
			return 0, false, healthError("seq is not a uint64")
		}
		h.Seq, h.HasSeq = v, true
	}
	if h.HasSeq && !hasEpoch {
		return 0, false, healthError("seq without node_epoch")
	}
	if raw, ok := present("retired_epochs"); ok {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return 0, false, healthError("retired_epochs is not an array")
		}
		if len(list) > MaxRetiredEpochs {
			return 0, false, healthError("more than " + strconv.Itoa(MaxRetiredEpochs) + " retired epochs")
		}
		for _, e := range list {
			v, err := strconv.ParseUint(string(e), 10, 64)
			if err != nil {
				return 0, false, healthError("retired_epochs: not a uint64")
			}
			if slices.Contains(h.RetiredEpochs, v) || hasEpoch && v == epoch {
				return 0, false, healthError("retired_epochs: a value twice, or the value's own node_epoch")
			}
			h.RetiredEpochs = append(h.RetiredEpochs, v)
		}
	}
	at := func(id FlowID) *FlowHealth {
		for i := range h.Flows {
			if h.Flows[i].ID == id {
				return &h.Flows[i]
			}
		}
		h.Flows = append(h.Flows, FlowHealth{ID: id})
		return &h.Flows[len(h.Flows)-1]
	}
	if raw, ok := present("processed_rows"); ok {
		m, err := rawMap("processed_rows", raw)
		if err != nil {
			return 0, false, err
		}
		h.HasProcessedRows = true
		for k, n := range m {
			id, err := parseJSONFlowID("processed_rows", k)
			if err != nil {
				return 0, false, err
			}
			v, perr := strconv.ParseUint(string(n), 10, 64)
			if perr != nil {
				return 0, false, healthError("processed_rows[" + k + "]: not a uint64")
			}
			f := at(id)
			f.Has |= HasProcessedRows
			f.ProcessedRows = v
		}
	}
	if raw, ok := present("last_errors"); ok {
		m, err := rawMap("last_errors", raw)
		if err != nil {
			return 0, false, err
		}
		h.HasLastErrors = true
		for k, list := range m {
			id, err := parseJSONFlowID("last_errors", k)
			if err != nil {
				return 0, false, err
			}
			path := "last_errors[" + k + "]"
			var errs []map[string]json.RawMessage
			if string(list) == "null" {
				return 0, false, healthError(path + ": null, not an array of errors")
			}
			if err := json.Unmarshal(list, &errs); err != nil {
				return 0, false, healthError(path + ": not an array of errors")
			}
			if len(errs) > MaxFlowErrors {
				return 0, false, healthError(path + ": more than " + strconv.Itoa(MaxFlowErrors) + " errors")
			}
			f := at(id)
			f.Has |= HasLastErrors
			for _, e := range errs {
				fe, reason := storedError(e)
				if reason != "" {
					return 0, false, healthError(path + ": " + reason)
				}
				f.LastErrors = append(f.LastErrors, fe)
			}
		}
	}
	slices.SortFunc(h.Flows, func(a, b FlowHealth) int { return cmpID(a.ID, b.ID) })
	return epoch, hasEpoch, nil
}

// countKeys counts the keys of the JSON object raw, each time it names
// one.
func countKeys(raw []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // '{'
		return 0, err
	}
	n := 0
	for dec.More() {
		if _, err := dec.Token(); err != nil {
			return 0, err
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// loneSurrogate reports whether the JSON string literal raw holds an
// escaped UTF-16 surrogate that is not half of a pair: serde_json refuses
// it, encoding/json would read it as U+FFFD.
func loneSurrogate(raw []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
		return rune(v), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // a short escape: skip the escaped byte
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if low, ok := hex4(i + 6); !ok || low < 0xDC00 || low > 0xDFFF {
				return true
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		default:
			i += 5
		}
	}
	return false
}

// rawMap reads a map of flow id to raw value, refusing a key named twice.
func rawMap(name string, raw json.RawMessage) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, healthError(name + " is not a map")
	}
	// encoding/json keeps the last of a key named twice; count the keys to
	// refuse it, as the report's rules do.
	dec := json.NewDecoder(bytes.NewReader(raw))
	_, _ = dec.Token() // '{'
	n := 0
	for dec.More() {
		if _, err := dec.Token(); err != nil {
			return nil, healthError(name + " is not a map")
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, healthError(name + " is not a map")
		}
		n++
	}
	if n != len(m) {
		return nil, healthError(name + ": a flow named twice")
	}
	return m, nil
}

// storedError reads one error object of a stored value.
func storedError(e map[string]json.RawMessage) (FlowError, string) {
	if e == nil {
		return FlowError{}, "an error is not an object"
	}
	rt, ok := e["time"]
	if !ok {
		return FlowError{}, "an error without time"
	}
	t, err := strconv.ParseInt(string(rt), 10, 64)
	if err != nil {
		return FlowError{}, "time is not an int64"
	}
	rm, ok := e["message"]
	if !ok {
		return FlowError{}, "an error without message"
	}
	if !utf8.Valid(rm) {
		return FlowError{}, "message not UTF-8"
	}
	if loneSurrogate(rm) {
		return FlowError{}, "message with a lone surrogate escape"
	}
	var msg string
	if err := json.Unmarshal(rm, &msg); err != nil {
		return FlowError{}, "message is not a string"
	}
	if !ValidMessage(msg) {
		return FlowError{}, "message empty or longer than " + strconv.Itoa(MaxErrorMessage) + " bytes"
	}
	return FlowError{Time: t, Message: msg}, ""
}
