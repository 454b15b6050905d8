package flowstate

import (
	"slices"
	"strconv"
	"unicode/utf8"
)

// The limits of a flow's health (PROTOCOL.md v3, report fields).
const (
	MaxFlowErrors    = 3    // errors one node reports per flow, and the stats view keeps per flow
	MaxErrorMessage  = 1024 // bytes of an error message, at least 1
	MaxRetiredEpochs = 8    // node_epoch values a node's stored value remembers
)

// FlowError is one error of a flow as a node reports it.
type FlowError struct {
	Time    int64 // unix ms
	Message string
}

// HealthFields says which of a FlowHealth's values are present.
type HealthFields uint8

// The fields of a FlowHealth.
const (
	HasProcessedRows HealthFields = 1 << iota
	HasLastErrors
)

// FlowHealth is one flow's health on one node: the rows it processed since
// the node's process started, and its last errors, newest first (at most
// MaxFlowErrors). A flow named in last_errors with an empty array has
// HasLastErrors and no errors.
type FlowHealth struct {
	ID            FlowID
	Has           HealthFields
	ProcessedRows uint64
	LastErrors    []FlowError
}

// Health is the v3 part of a node's report and of its stored value: per flow
// the health, sorted by ID, each ID once; the report's seq; and, in a stored
// value, the node_epoch values the node moved away from (oldest first, at
// most MaxRetiredEpochs). The Has flags say which report fields were present:
// a map that was absent or nil is not, an empty one is.
type Health struct {
	HasProcessedRows bool
	HasLastErrors    bool
	HasSeq           bool
	Seq              uint64
	Flows            []FlowHealth
	RetiredEpochs    []uint64
}

// IsV3 reports whether h carries a v3 report field (processed_rows,
// last_errors or seq): only then does a node's stored value have a v3 part.
func (h *Health) IsV3() bool {
	return h != nil && (h.HasProcessedRows || h.HasLastErrors || h.HasSeq)
}

// Reset empties h, keeping its capacity but none of its errors: the flows
// it held no longer reference their messages.
func (h *Health) Reset() {
	clear(h.Flows)
	*h = Health{Flows: h.Flows[:0], RetiredEpochs: h.RetiredEpochs[:0]}
}

// ValidMessage reports whether s is a valid error message: valid UTF-8, 1 to
// MaxErrorMessage bytes.
func ValidMessage[S ~string | ~[]byte](s S) bool {
	return len(s) >= 1 && len(s) <= MaxErrorMessage && utf8.Valid([]byte(s))
}

// Check returns why h breaks the rules of a report's v3 fields, or "": flows
// sorted by ID, each once, with at least one field; at most MaxFlowErrors
// errors per flow, each with a valid message; at most MaxRetiredEpochs
// retired epochs. The reason names the flow.
func (h *Health) Check() string {
	for i := range h.Flows {
		f := &h.Flows[i]
		path := "[" + strconv.FormatUint(uint64(f.ID), 10) + "]"
		if i > 0 && h.Flows[i-1].ID >= f.ID {
			return "flow " + path + " out of order or twice"
		}
		if f.Has == 0 {
			return "flow " + path + " has no field"
		}
		if f.Has&HasProcessedRows != 0 && !h.HasProcessedRows || f.Has&HasLastErrors != 0 && !h.HasLastErrors {
			return "flow " + path + " in a map that is absent"
		}
		if f.Has&HasLastErrors == 0 && len(f.LastErrors) > 0 {
			return "last_errors" + path + ": errors without the field"
		}
		if len(f.LastErrors) > MaxFlowErrors {
			return "last_errors" + path + ": more than " + strconv.Itoa(MaxFlowErrors) + " errors"
		}
		for k := range f.LastErrors {
			if !ValidMessage(f.LastErrors[k].Message) {
				return "last_errors" + path + ": message empty, longer than " + strconv.Itoa(MaxErrorMessage) + " bytes or not UTF-8"
			}
		}
	}
	if len(h.RetiredEpochs) > MaxRetiredEpochs {
		return "more than " + strconv.Itoa(MaxRetiredEpochs) + " retired epochs"
	}
	return ""
}

// ErrorBytes is the bytes of error messages h holds, as --max-error-bytes
// counts them; 0 for a nil h.
func (h *Health) ErrorBytes() int {
	if h == nil {
		return 0
	}
	n := 0
	for i := range h.Flows {
		for _, e := range h.Flows[i].LastErrors {
			n += len(e.Message)
		}
	}
	return n
}

// CutMessage returns s cut to at most MaxErrorMessage bytes at a UTF-8
// character boundary, as a client cuts an error message before it sends
// it; s itself when it is short enough.
func CutMessage(s string) string {
	if len(s) <= MaxErrorMessage {
		return s
	}
	i := MaxErrorMessage
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// Clone returns a deep copy of h (messages are immutable strings, shared):
// three allocations, whatever the number of flows.
func (h *Health) Clone() *Health {
	c := *h
	c.Flows, _ = AppendFlowHealth(make([]FlowHealth, 0, len(h.Flows)), make([]FlowError, 0, ErrorCount(h.Flows)), h.Flows)
	c.RetiredEpochs = slices.Clone(h.RetiredEpochs)
	return &c
}

// Named reports whether f names its flow: a flow named only by an empty
// last_errors array is named nowhere (PROTOCOL.md v3, report fields).
func (f *FlowHealth) Named() bool {
	return f.Has&HasProcessedRows != 0 || len(f.LastErrors) > 0
}

// WithoutUnnamed returns h without the flows that it names only by an
// empty error array: h itself when it has none, else a copy.
func (h *Health) WithoutUnnamed() *Health {
	if h == nil {
		return nil
	}
	k := 0
	for k < len(h.Flows) && h.Flows[k].Named() {
		k++
	}
	if k == len(h.Flows) {
		return h
	}
	c := *h
	c.Flows = make([]FlowHealth, k, len(h.Flows)-1)
	copy(c.Flows, h.Flows[:k])
	for i := k + 1; i < len(h.Flows); i++ {
		if h.Flows[i].Named() {
			c.Flows = append(c.Flows, h.Flows[i])
		}
	}
	return &c
}

// ErrorCount is the number of errors flows hold.
func ErrorCount(flows []FlowHealth) int {
	n := 0
	for i := range flows {
		n += len(flows[i].LastErrors)
	}
	return n
}

// AppendFlowHealth appends deep copies of src to dst, their errors appended
// to errs, and returns both; the copies' LastErrors are slices of errs's
// array. A caller that gives errs room for every error it appends
// (ErrorCount) keeps them in one array, allocated once.
func AppendFlowHealth(dst []FlowHealth, errs []FlowError, src []FlowHealth) ([]FlowHealth, []FlowError) {
	errs = slices.Grow(errs, ErrorCount(src))
	k := len(dst)
	dst = append(dst, src...)
	for i := k; i < len(dst); i++ {
		if e := dst[i].LastErrors; e != nil {
			j := len(errs)
			errs = append(errs, e...)
			dst[i].LastErrors = errs[j:len(errs):len(errs)]
		}
	}
	return dst, errs
}

// DistinctFlows counts the flow ids named by flows and by health, both
// sorted by ID: the flows a report or a stored value names across all its
// maps, as --max-flows and --max-total-flows count them (a flow named only
// by an empty error array is named nowhere: FlowHealth.Named). Linear, no
// allocation.
func DistinctFlows(flows []Flow, health []FlowHealth) int {
	n, i := len(flows), 0
	for k := range health {
		if !health[k].Named() {
			continue
		}
		id := health[k].ID
		for i < len(flows) && flows[i].ID < id {
			i++
		}
		if i == len(flows) || flows[i].ID != id {
			n++
		}
	}
	return n
}
