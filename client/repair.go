package client

import (
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/flowstate-io/flowstate/flowstate"
)

// RepairErrors returns errs as a report sends them (PROTOCOL.md v3, report
// fields), so that a worker takes the report rather than refuse it whole
// for one bad message: in each message every invalid UTF-8 sequence
// replaced with U+FFFD (one for each maximal part of a sequence, as
// Rust's String::from_utf8_lossy does), the message cut to
// flowstate.MaxErrorMessage bytes at a character boundary; empty messages
// dropped; of the rest the first flowstate.MaxFlowErrors (the newest, the
// list being newest first) kept. It returns errs itself, and "", when
// nothing needed repair; else a new slice and what it repaired.
func RepairErrors(errs []flowstate.FlowError) ([]flowstate.FlowError, string) {
	bad := len(errs) > flowstate.MaxFlowErrors
	for _, e := range errs {
		bad = bad || !flowstate.ValidMessage(e.Message)
	}
	if !bad {
		return errs, ""
	}
	var what []string
	out := make([]flowstate.FlowError, 0, min(len(errs), flowstate.MaxFlowErrors))
	replaced, cut, dropped := 0, 0, 0
	for _, e := range errs {
		m := e.Message
		if !utf8.ValidString(m) {
			m = lossyUTF8(m)
			replaced++
		}
		if c := flowstate.CutMessage(m); len(c) < len(m) {
			m = c
			cut++
		}
		if m == "" {
			dropped++
			continue
		}
		if len(out) < flowstate.MaxFlowErrors {
			out = append(out, flowstate.FlowError{Time: e.Time, Message: m})
		}
	}
	if replaced > 0 {
		what = append(what, strconv.Itoa(replaced)+" not UTF-8 (invalid bytes replaced with U+FFFD)")
	}
	if cut > 0 {
		what = append(what, strconv.Itoa(cut)+" longer than "+strconv.Itoa(flowstate.MaxErrorMessage)+" bytes (cut)")
	}
	if dropped > 0 {
		what = append(what, strconv.Itoa(dropped)+" empty (dropped)")
	}
	if n := len(errs) - dropped; n > flowstate.MaxFlowErrors {
		what = append(what, strconv.Itoa(n)+" errors (the newest "+strconv.Itoa(flowstate.MaxFlowErrors)+" kept)")
	}
	return out, strings.Join(what, ", ")
}

// lossyUTF8 returns s with each maximal part of an invalid UTF-8 sequence
// replaced with U+FFFD: the Unicode standard's "substitution of maximal
// subparts", which Rust's String::from_utf8_lossy follows, so that both
// clients send the same message for the same bytes.
func lossyUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || n > 1 {
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		b.WriteRune(utf8.RuneError)
		i += maximalSubpart(s[i:])
	}
	return b.String()
}

// maximalSubpart is the length of the longest prefix of s, an invalid
// sequence, that starts a valid one (at least 1): the bytes one U+FFFD
// stands for.
func maximalSubpart(s string) int {
	c := s[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1 // not a lead byte
	}
	n := 1
	for k := 0; k < need && n < len(s); k++ {
		if s[n] < lo || s[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}

// repairErrors returns r with every flow's error list as RepairErrors
// makes it, its Health copied first if one changes so that the caller's
// stays as given; the first repair of the Client is logged, once.
func (c *Client) repairErrors(r Report) Report {
	copied := false
	for i := range r.Health.Flows {
		errs, what := RepairErrors(r.Health.Flows[i].LastErrors)
		if what == "" {
			continue
		}
		if !copied {
			r.Health.Flows = r.Health.Clone().Flows
			copied = true
		}
		r.Health.Flows[i].LastErrors = errs
		if c.repairLogged.CompareAndSwap(false, true) {
			c.log.Warn("flowstate client: repaired the error list of a report, which the worker would refuse whole; later repairs are not logged",
				slog.Uint64("node", r.NodeID), slog.Uint64("flow", uint64(r.Health.Flows[i].ID)), slog.String("repaired", what))
		}
	}
	return r
}
