package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

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

// check checks the history, within timeout; forgets are when faults began
// that may have made the store forget acknowledged writes (forgotAt).
func check(ops []op, opens map[string]int64, forgets []int64, lag, timeout time.Duration) verdict {
	h, table := operations(ops, int64(lag))
	m := newModel(h, table, opens, forgets, int64(lag))
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(m, h, timeout)
	v := verdict{result: res, ops: len(h), took: time.Since(start), model: m, info: info}
	parts := m.Partition(h)
	v.partitions = len(parts)
	if res == porcupine.Ok {
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
		fmt.Fprintf(&b, "report node %d", in.node+1)
		if in.seq != 0 {
			fmt.Fprintf(&b, " node_epoch %d seq %d", in.nodeEpoch, in.seq)
		}
		b.WriteString(" " + describeReport(in.report))
	case opInvalid:
		fmt.Fprintf(&b, "invalid report node %d (%s)", in.node+1, in.why)
	}
	switch out.status {
	case stOK:
		fmt.Fprintf(&b, " -> epoch %s rev %d", out.epoch, out.rev)
		if in.kind == opGet {
			b.WriteString(" " + describeReport(out.agg) + describeMarks(out.marks))
		}
		if out.alien {
			b.WriteString(" (holds what no client sent) " + out.code)
		}
	case stRejected:
		b.WriteString(" -> rejected " + out.code)
	case stStale:
		b.WriteString(" -> stale " + out.code)
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

// describeMarks names the node_epoch and seq of each node's report that a
// get shows (markerFlow), "" if it shows none.
func describeMarks(marks [nNodes]mark) string {
	var parts []string
	for n, m := range marks {
		if m.seq != 0 {
			parts = append(parts, fmt.Sprintf("%d:%d/%d", n+1, m.epoch, m.seq))
		}
	}
	if parts == nil {
		return ""
	}
	return " node_epoch/seq {" + strings.Join(parts, " ") + "}"
}
