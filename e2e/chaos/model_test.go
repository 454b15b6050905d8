package chaos

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// state is the model's state in one epoch: every node's last applied
// report, and what is known of the revision.
type state struct {
	nodes [nNodes]report
	rev   uint64
	exact bool // the revision is rev; else it is greater than rev
}

// aggregate is the per-flow, per-field max over the nodes' reports.
func (s *state) aggregate() report {
	var a report
	for n := range s.nodes {
		for f := range nFlows {
			for k := range 3 {
				a[f][k] = max(a[f][k], s.nodes[n][f][k])
			}
		}
	}
	return a
}

// serves reports whether a get may see revision r of this state.
func (s *state) serves(r uint64) bool {
	if s.exact {
		return r == s.rev
	}
	return r > s.rev
}

// follows reports whether a write acked at r may follow this state: within
// an epoch revisions increase with every applied report.
func (s *state) follows(r uint64) bool {
	if s.exact {
		return r > s.rev
	}
	return r > s.rev+1
}

// step is the worker's specification. A get returns the aggregate at one
// instant with its revision; an acked report takes effect at one instant
// with a greater revision; a report not answered, or answered 5xx, takes
// effect at one instant or never; an acked invalid report is impossible.
// Rejected reports and failed gets change nothing and are not in the
// history.
func step(st, in, out any) []any {
	s, i, o := st.(state), in.(input), out.(output)
	switch {
	case i.kind == opGet:
		if o.alien || s.aggregate() != o.agg || !s.serves(o.rev) {
			return nil
		}
		s.rev, s.exact = o.rev, true
		return []any{s}
	case i.kind == opInvalid || o.alien:
		return nil
	case o.status == stOK:
		if !s.follows(o.rev) {
			return nil
		}
		s.nodes[i.node] = i.report
		s.rev, s.exact = o.rev, true
		return []any{s}
	default:
		applied := s
		applied.nodes[i.node] = i.report
		applied.exact = false
		return []any{s, applied}
	}
}

var hashSeed = maphash.MakeSeed()

// newModel is the model with its partition by epoch. opens gives, for
// epochs whose start is known (a memory worker's instance), the time it
// started; lag bounds how long after its invocation an unanswered report
// may still take effect.
func newModel(opens map[string]int64, lag int64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation { return partition(h, opens, lag) },
		Init:      func() []any { return []any{state{exact: true}} },
		Step:      step,
		Hash:      func(s any) uint64 { return maphash.Comparable(hashSeed, s.(state)) },
		DescribeOperation: func(in, out any) string {
			return describeOp(in.(input), out.(output))
		},
		DescribeState: func(s any) string {
			st := s.(state)
			return fmt.Sprintf("rev %s%d agg %s", map[bool]string{true: "", false: ">"}[st.exact], st.rev, describeReport(st.aggregate()))
		},
	}
	return nm.ToModel()
}

// partition splits the history by epoch: each epoch's partition holds the
// operations that observed it and every report of unknown outcome that may
// have taken effect in it (invoked between the epoch's start, or its first
// observation less lag, and its last observation). The model starts empty
// in each one.
func partition(h []porcupine.Operation, opens map[string]int64, lag int64) [][]porcupine.Operation {
	type span struct {
		first, last int64
		ops         []porcupine.Operation
	}
	spans := map[string]*span{}
	var unknown []porcupine.Operation
	for _, o := range h {
		out := o.Output.(output)
		if out.status != stOK {
			unknown = append(unknown, o)
			continue
		}
		sp := spans[out.epoch]
		if sp == nil {
			sp = &span{first: o.Call, last: o.Return}
			spans[out.epoch] = sp
		}
		sp.first, sp.last = min(sp.first, o.Call), max(sp.last, o.Return)
		sp.ops = append(sp.ops, o)
	}
	var parts []*span
	for e, sp := range spans {
		open, ok := opens[e]
		if !ok {
			open = sp.first - lag
		}
		for _, u := range unknown {
			if u.Call >= open && u.Call <= sp.last {
				sp.ops = append(sp.ops, u)
			}
		}
		parts = append(parts, sp)
	}
	slices.SortFunc(parts, func(a, b *span) int { return cmp.Compare(a.first, b.first) })
	out := make([][]porcupine.Operation, len(parts))
	for i, sp := range parts {
		out[i] = sp.ops
	}
	return out
}

// operations converts the recorded history into porcupine's: answered
// gets, acked reports, reports of unknown outcome (which may take effect
// up to lag after their invocation), and acked invalid reports.
func operations(ops []op, lag int64) []porcupine.Operation {
	var h []porcupine.Operation
	for _, o := range ops {
		switch {
		case o.out.status == stOK:
		case o.out.status == stUnknown && o.in.kind == opReport:
			o.ret = max(o.ret, o.call+lag)
		default:
			continue
		}
		h = append(h, porcupine.Operation{ClientId: o.client, Input: o.in, Call: o.call, Output: o.out, Return: o.ret})
	}
	return h
}

// verdict is the outcome of a check.
type verdict struct {
	result     porcupine.CheckResult
	ops        int // operations checked
	partitions int
	took       time.Duration
	first      []string // the first operations that cannot be linearised
	model      porcupine.Model
	info       porcupine.LinearizationInfo
}

// check checks the history, within timeout.
func check(ops []op, opens map[string]int64, lag, timeout time.Duration) verdict {
	h := operations(ops, int64(lag))
	m := newModel(opens, int64(lag))
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(m, h, timeout)
	v := verdict{result: res, ops: len(h), took: time.Since(start), model: m, info: info}
	parts := m.Partition(h)
	v.partitions = len(parts)
	if res != porcupine.Illegal {
		return v
	}
	partials := info.PartialLinearizations()
	for p, part := range parts {
		longest := []int{}
		for _, l := range partials[p] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(part) {
			continue
		}
		done := map[int]bool{}
		for _, id := range longest {
			done[id] = true
		}
		var left []porcupine.Operation
		for id, o := range part {
			if !done[id] {
				left = append(left, o)
			}
		}
		slices.SortFunc(left, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		for _, o := range left[:min(5, len(left))] {
			v.first = append(v.first, fmt.Sprintf("epoch partition %d: client %d [%v, %v] %s", p, o.ClientId,
				time.Duration(o.Call), time.Duration(o.Return), describeOp(o.Input.(input), o.Output.(output))))
		}
		break
	}
	return v
}

func describeOp(in input, out output) string {
	var b strings.Builder
	switch in.kind {
	case opGet:
		b.WriteString("get")
	case opReport:
		fmt.Fprintf(&b, "report node %d %s", in.node+1, describeReport(in.report))
	case opInvalid:
		fmt.Fprintf(&b, "invalid report node %d (%s)", in.node+1, in.why)
	}
	switch out.status {
	case stOK:
		fmt.Fprintf(&b, " -> epoch %s rev %d", out.epoch, out.rev)
		if in.kind == opGet {
			b.WriteString(" " + describeReport(out.agg))
		}
		if out.alien {
			b.WriteString(" (holds what no client sent) " + out.code)
		}
	case stRejected:
		b.WriteString(" -> rejected " + out.code)
	default:
		b.WriteString(" -> unknown: " + out.code)
	}
	return b.String()
}

func describeReport(r report) string {
	var parts []string
	for f, v := range r {
		if v != ([3]uint16{}) {
			parts = append(parts, fmt.Sprintf("%d:%v", f+1, v))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}
