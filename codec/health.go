package codec

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/flowstate-io/flowstate/flowstate"
)

// The v3 fields of a report: processed_rows, last_errors and seq
// (PROTOCOL.md v3, report fields), read into Report.Health.

// healthBits are the Has bits of the two health maps.
var healthBits = [...]flowstate.HealthFields{
	fieldProcessedRows: flowstate.HasProcessedRows,
	fieldLastErrors:    flowstate.HasLastErrors,
}

// maxInterned is the most distinct messages a Decoder keeps to reuse their
// strings; past it, it starts over.
const maxInterned = 4096

// healthMap reads processed_rows or last_errors at b[i:] into r.Health.
// Its flows are appended to r.Health.Flows, checked for a flow named twice,
// and joined with the other map's at the end of the report (joinHealth).
func (d *Decoder) healthMap(b []byte, i int, f field, r *Report) (int, *DecodeError) {
	name := fieldNames[f]
	n, present, i, err := fieldMap(b, i, name)
	if err != nil || !present {
		return i, err
	}
	h := &r.Health
	if f == fieldProcessedRows {
		h.HasProcessedRows = true
	} else {
		h.HasLastErrors = true
	}
	if limit := uint64(max(d.MaxFlows, 0)); limit > 0 && n > limit {
		return i, newError(name, KindTooManyFlows, "map of "+strconv.FormatUint(n, 10)+" flows, limit "+strconv.Itoa(d.MaxFlows))
	}
	start := len(h.Flows)
	d.healthRun = start // the second map's run, when the first had flows
	sorted := true
	for ; n > 0; n-- {
		id, j, err := mapFlowID(b, i, name)
		if err != nil {
			return j, err
		}
		i = j
		if k := len(h.Flows); k > start && uint64(h.Flows[k-1].ID) >= id {
			sorted = false
		}
		// Filled in place: a report rejected midway leaves its flows
		// behind, for the next Decode to reset.
		h.Flows = slices.Grow(h.Flows, 1)
		h.Flows = h.Flows[:len(h.Flows)+1]
		fh := &h.Flows[len(h.Flows)-1]
		fh.ID, fh.Has = flowstate.FlowID(id), healthBits[f]
		if f == fieldProcessedRows {
			v, j, fast := uintFast(b, i)
			if !fast {
				// The path is built only on error: it allocates.
				v, j, err = uintField(b, i, flowPath(name, id))
			}
			fh.ProcessedRows, fh.LastErrors, i = v, nil, j
		} else {
			fh.ProcessedRows = 0
			fh.LastErrors, i, err = errorList(d, b, i, id, false, &r.errs, reportError)
		}
		if err != nil {
			return i, err
		}
	}
	if !sorted {
		run := h.Flows[start:]
		slices.SortStableFunc(run, func(a, b flowstate.FlowHealth) int { return cmp.Compare(a.ID, b.ID) })
		for k := 1; k < len(run); k++ {
			if run[k].ID == run[k-1].ID {
				return i, newError(flowPath(name, uint64(run[k].ID)), KindDuplicateFlow, "named twice")
			}
		}
	}
	return i, nil
}

// arrayLenAt reads an array header and returns the number of items it
// claims.
func arrayLenAt(b []byte, i int) (n uint64, next int, st status) {
	return lenAt(b, i, codeFixArray, codeArray16, codeArray32)
}

// errorList reads flow id's array of errors: each read by errorMap (with
// node_id when withNode), converted by conv and appended to *store, the
// backing store of the lists read before; it returns them.
func errorList[E any](d *Decoder, b []byte, i int, id uint64, withNode bool, store *[]E, conv func(flowstate.StatsError) E) ([]E, int, *DecodeError) {
	n, i, st := arrayLenAt(b, i)
	if st != ok {
		return nil, i, scanError(flowPath("last_errors", id), st, codeAt(b, i), "an array of errors")
	}
	if n > flowstate.MaxFlowErrors {
		return nil, i, newError(flowPath("last_errors", id), KindBadError, strconv.FormatUint(n, 10)+" errors, at most "+strconv.Itoa(flowstate.MaxFlowErrors))
	}
	start := len(*store)
	for k := range int(n) {
		e, j, err := d.errorMap(b, i, id, k, withNode)
		if err != nil {
			return nil, j, err
		}
		*store, i = append(*store, conv(e)), j
	}
	all := *store
	return all[start:len(all):len(all)], i, nil
}

// reportError is a report's error: a stats view's without the node.
func reportError(e flowstate.StatsError) flowstate.FlowError {
	return flowstate.FlowError{Time: e.Time, Message: e.Message}
}

// errorMap reads error k of flow id's array: time and message required, and
// node_id too when withNode (the stats view's form; in a report, node_id is
// a key like any unknown one); other keys ignored. The error's Field is
// last_errors[id][k], followed by ".time", ".node_id" or ".message" for a
// problem with that key.
func (d *Decoder) errorMap(b []byte, i int, id uint64, k int, withNode bool) (flowstate.StatsError, int, *DecodeError) {
	var e flowstate.StatsError
	at := func(key string) string { // built only on error: it allocates
		return flowPath("last_errors", id) + "[" + strconv.Itoa(k) + "]" + key
	}
	n, i, st := mapLenAt(b, i)
	if st != ok {
		return e, i, scanError(at(""), st, codeAt(b, i), "an error map")
	}
	var hasTime, hasNode, hasMessage bool
	for ; n > 0; n-- {
		key, j, st := strAt(b, i)
		if st != ok {
			return e, i, scanError(at(""), st, codeAt(b, i), "a string key")
		}
		i = j
		switch {
		case string(key) == "time":
			if hasTime {
				return e, i, newError(at(".time"), KindDuplicateField, "named twice")
			}
			hasTime = true
			v, neg, j, st := intAt(b, i)
			if st != ok {
				return e, i, scanError(at(".time"), st, codeAt(b, i), "an integer")
			}
			if !neg && v > math.MaxInt64 {
				return e, i, newError(at(".time"), KindOutOfRange, "time "+strconv.FormatUint(v, 10)+" overflows int64")
			}
			e.Time, i = int64(v), j
		case withNode && string(key) == "node_id":
			if hasNode {
				return e, i, newError(at(".node_id"), KindDuplicateField, "named twice")
			}
			hasNode = true
			v, neg, j, st := intAt(b, i)
			switch {
			case st != ok:
				return e, i, scanError(at(".node_id"), st, codeAt(b, i), "an unsigned integer")
			case neg:
				return e, i, newError(at(".node_id"), KindOutOfRange, "negative value "+strconv.FormatInt(int64(v), 10))
			}
			e.NodeID, i = v, j
		case string(key) == "message":
			if hasMessage {
				return e, i, newError(at(".message"), KindDuplicateField, "named twice")
			}
			hasMessage = true
			s, j, st := strAt(b, i)
			if st != ok {
				return e, i, scanError(at(".message"), st, codeAt(b, i), "a string")
			}
			m, seen := d.seenMessage(s) // only valid messages are kept: no need to check one again
			if !seen {
				if !flowstate.ValidMessage(s) {
					return e, i, newError(at(".message"), KindBadError,
						"message of "+strconv.Itoa(len(s))+" bytes: want 1 to "+strconv.Itoa(flowstate.MaxErrorMessage)+" bytes of UTF-8")
				}
				m = d.intern(s)
			}
			e.Message, i = m, j
		default:
			// The error map is level 4: the body, last_errors, the array, it.
			if i, st = skipAt(b, i, 5); st != ok {
				return e, i, scanError(at(""), st, 0, "")
			}
		}
	}
	switch {
	case !hasTime:
		return e, i, newError(at(""), KindBadError, "error without time")
	case withNode && !hasNode:
		return e, i, newError(at(""), KindBadError, "error without node_id")
	case !hasMessage:
		return e, i, newError(at(""), KindBadError, "error without message")
	}
	return e, i, nil
}

// recentMessages is the number of slots of a Decoder's cache of recent
// messages; a power of two.
const recentMessages = 64

// recentSlot picks the slot of message s (not empty) in the cache of
// recent messages from its length and three of its bytes: no hashing of
// the whole message.
func recentSlot(s []byte) int {
	n := len(s)
	return int(uint(n)^uint(s[0])<<1^uint(s[n/2])<<3^uint(s[n-1])<<5) & (recentMessages - 1)
}

// seenMessage returns the string of message s if the Decoder read it
// before. A message in the cache of recent ones costs one comparison; the
// others, a lookup of the map of every message kept, which hashes the
// whole message.
func (d *Decoder) seenMessage(s []byte) (string, bool) {
	if len(s) == 0 {
		return "", false
	}
	slot := recentSlot(s)
	if m := d.recent[slot]; m == string(s) {
		return m, true
	}
	m, ok := d.messages[string(s)]
	if ok {
		d.recent[slot] = m
	}
	return m, ok
}

// intern keeps s, a valid message that seenMessage did not find, and
// returns it as a string: the string the next equal message reuses, so
// that a node that repeats its errors costs no allocation.
func (d *Decoder) intern(s []byte) string {
	if d.messages == nil || len(d.messages) >= maxInterned {
		d.messages = make(map[string]string)
	}
	m := string(s)
	d.messages[m] = m
	if len(s) > 0 {
		d.recent[recentSlot(s)] = m
	}
	return m
}

// joinHealth joins the flows of processed_rows and last_errors (each run
// sorted) into one list sorted by ID, and checks that the report's flows
// across all its maps stay within MaxFlows.
func (d *Decoder) joinHealth(r *Report) *DecodeError {
	h := &r.Health
	if len(h.Flows) == 0 {
		return nil
	}
	if k := d.healthRun; k > 0 && k < len(h.Flows) {
		h.Flows = d.mergeHealth(h.Flows, k)
	}
	if d.MaxFlows <= 0 {
		return nil
	}
	if flowstate.DistinctFlows(r.Flows, h.Flows) <= d.MaxFlows {
		return nil
	}
	// Name the first flow over the limit.
	n := len(r.Flows)
	for k := range h.Flows {
		if h.Flows[k].Named() && !inUnion(r.Flows, h.Flows[k].ID) {
			if n++; n > d.MaxFlows {
				f := &h.Flows[k]
				name := fieldNames[fieldProcessedRows]
				if f.Has&flowstate.HasProcessedRows == 0 {
					name = fieldNames[fieldLastErrors]
				}
				return newError(flowPath(name, uint64(f.ID)), KindTooManyFlows, "more than "+strconv.Itoa(d.MaxFlows)+" flows")
			}
		}
	}
	return nil
}

// mergeHealth joins two runs of flows, each sorted by ID, each ID once:
// flows[:k] and flows[k:]. When the second names only flows of the first (a
// node reports its errors for the flows it reports rows for), it is merged
// in place; otherwise both are merged through d.htmp. Linear either way.
func (d *Decoder) mergeHealth(flows []flowstate.FlowHealth, k int) []flowstate.FlowHealth {
	a, b := flows[:k], flows[k:]
	c := 0
	inPlace := true
	for m := range b {
		for c < len(a) && a[c].ID < b[m].ID {
			c++
		}
		if c == len(a) || a[c].ID != b[m].ID {
			inPlace = false
			break
		}
		joinFlowHealth(&a[c], &b[m]) // idempotent: a later merge gives the same
	}
	if inPlace {
		return a
	}
	out := d.htmp[:0]
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i].ID < b[j].ID:
			out = append(out, a[i])
			i++
		case i == len(a) || b[j].ID < a[i].ID:
			out = append(out, b[j])
			j++
		default:
			f := a[i]
			joinFlowHealth(&f, &b[j])
			out = append(out, f)
			i, j = i+1, j+1
		}
	}
	d.htmp = out
	return append(flows[:0], out...)
}

// joinFlowHealth copies the fields that src has into f.
func joinFlowHealth(f, src *flowstate.FlowHealth) {
	f.Has |= src.Has
	if src.Has&flowstate.HasProcessedRows != 0 {
		f.ProcessedRows = src.ProcessedRows
	}
	if src.Has&flowstate.HasLastErrors != 0 {
		f.LastErrors = src.LastErrors
	}
}
