package client

import (
	"fmt"
	"slices"
	"strconv"

	"flowstate/flowstate"
)

// maxDiffLines bounds LoadResult.Diff.
const maxDiffLines = 10

// diff lists how got differs from each node's last acknowledged report.
func (l *load) diff(got flowstate.FlowStateValue) []string {
	d := &differ{}
	for i := range l.nodes {
		n := &l.nodes[i]
		if l.matches(got, i, n.acked, n.ackedSeq, n.ackedTime) ||
			n.lastFailed && l.matches(got, i, true, n.seq, n.sentTime) {
			continue
		}
		l.describe(d, got, i, n.acked, n.ackedSeq, n.ackedTime)
	}
	// Flows that no simulated node owns.
	limit := uint64(l.cfg.Nodes) * uint64(l.cfg.Flows)
	var extra []flowstate.FlowID
	for _, f := range got.Flows() {
		if f.Has != 0 && (f.ID == 0 || uint64(f.ID) > limit) {
			extra = append(extra, f.ID)
		}
	}
	slices.Sort(extra)
	for _, id := range extra {
		d.add(fmt.Sprintf("flow %d: present, but no simulated node owns it", id))
	}
	return d.lines()
}

// matches reports whether got holds exactly the flows of report seq of
// node i, sent at t, or none of node i's flows when present is false.
func (l *load) matches(got flowstate.FlowStateValue, i int, present bool, seq uint64, t int64) bool {
	want := l.flows(nil, i, seq, t)
	for _, w := range want {
		size, hasSize := got.StateSize[w.ID]
		last, hasLast := got.LastExecTimeMap[w.ID]
		start, hasStart := got.StartTimeMap[w.ID]
		if !present {
			if hasSize || hasLast || hasStart {
				return false
			}
			continue
		}
		if !hasSize || !hasLast || !hasStart || size != w.StateSize || last != w.LastExecTime || start != w.StartTime {
			return false
		}
	}
	return true
}

// describe adds a line for each field of node i's flows that differs from
// its report seq sent at t (or from no flow, when present is false).
func (l *load) describe(d *differ, got flowstate.FlowStateValue, i int, present bool, seq uint64, t int64) {
	for _, w := range l.flows(nil, i, seq, t) {
		if !present {
			w.Has = 0
		}
		d.field(i, w.ID, "state_size", w.Has&flowstate.HasStateSize != 0, w.StateSize, got.StateSize)
		d.fieldInt(i, w.ID, "last_exec_time_map", w.Has&flowstate.HasLastExecTime != 0, w.LastExecTime, got.LastExecTimeMap)
		d.fieldInt(i, w.ID, "start_time_map", w.Has&flowstate.HasStartTime != 0, w.StartTime, got.StartTimeMap)
	}
}

// differ collects difference lines, keeping the first maxDiffLines.
type differ struct {
	out  []string
	more int
}

func (d *differ) add(line string) {
	if len(d.out) < maxDiffLines {
		d.out = append(d.out, line)
	} else {
		d.more++
	}
}

func (d *differ) lines() []string {
	if d.more > 0 {
		return append(d.out, fmt.Sprintf("... and %d more differences", d.more))
	}
	return d.out
}

func (d *differ) field(node int, id flowstate.FlowID, name string, has bool, want uint64, got map[flowstate.FlowID]uint64) {
	g, ok := got[id]
	if ok == has && g == want || !ok && !has {
		return
	}
	d.add(fmt.Sprintf("flow %d of node %d: %s is %s, want %s", id, node, name,
		show(ok, strconv.FormatUint(g, 10)), show(has, strconv.FormatUint(want, 10))))
}

func (d *differ) fieldInt(node int, id flowstate.FlowID, name string, has bool, want int64, got map[flowstate.FlowID]int64) {
	g, ok := got[id]
	if ok == has && g == want || !ok && !has {
		return
	}
	d.add(fmt.Sprintf("flow %d of node %d: %s is %s, want %s", id, node, name,
		show(ok, strconv.FormatInt(g, 10)), show(has, strconv.FormatInt(want, 10))))
}

func show(present bool, v string) string {
	if !present {
		return "absent"
	}
	return v
}
