package loadgen

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/flowstate"
)

// maxDiffLines bounds Check.Diff.
const maxDiffLines = 10

// Check is the worker's final aggregate compared with what the nodes sent.
type Check struct {
	// State is the aggregate a get returned.
	State client.State
	// Diff lists how State differs from each node's last acknowledged
	// report (at most a few lines, the last one counting the rest); empty
	// when they match exactly.
	Diff []string
}

// Exact reports whether the aggregate is exactly the union of each node's
// last acknowledged report.
func (c Check) Exact() bool { return len(c.Diff) == 0 }

// Check gets the aggregate and compares it with each node's last
// acknowledged report, of g and of also (generators of other nodes sending
// to the same worker): a node whose last report failed may also show that
// one, as it may have been applied; flows that none of them owns are
// differences. It returns an error when no worker answers the get.
func (g *Generator) Check(ctx context.Context, also ...*Generator) (Check, error) {
	c, err := client.New(g.nc, client.Options{Prefix: g.cfg.Prefix, Timeout: g.cfg.Timeout, MaxFlows: math.MaxInt, MaxGetBytes: math.MaxInt}) // its own worker, of any size
	if err != nil {
		return Check{}, fmt.Errorf("loadgen: check: %w", err)
	}
	st, err := c.Get(ctx)
	if err != nil {
		return Check{}, fmt.Errorf("loadgen: check: %w", err)
	}
	d := &differ{}
	gens := append([]*Generator{g}, also...)
	for _, gen := range gens {
		gen.diff(d, st.Value)
	}
	var extra []flowstate.FlowID
	for _, f := range st.Value.Flows() {
		if f.Has != 0 && !slices.ContainsFunc(gens, func(gen *Generator) bool { return gen.owns(f.ID) }) {
			extra = append(extra, f.ID)
		}
	}
	slices.Sort(extra)
	for _, id := range extra {
		d.add(fmt.Sprintf("flow %d: present, but no simulated node owns it", id))
	}
	return Check{State: st, Diff: d.lines()}, nil
}

// owns reports whether one of g's nodes owns flow id.
func (g *Generator) owns(id flowstate.FlowID) bool {
	lo := uint64(g.cfg.FirstNode) * uint64(g.cfg.Flows)
	return uint64(id) > lo && uint64(id) <= lo+uint64(g.cfg.Nodes)*uint64(g.cfg.Flows)
}

// diff adds a line to d for each field where got differs from the nodes'
// last acknowledged reports.
func (g *Generator) diff(d *differ, got flowstate.FlowStateValue) {
	for i := range g.nodes {
		n := &g.nodes[i]
		if g.matches(got, i, n.known) || n.last != handled && g.matches(got, i, n.sent) {
			continue
		}
		g.describe(d, got, i, n.known)
	}
}

// matches reports whether got holds exactly the flows of report known-1 of
// node i, or none of its flows when known is 0.
func (g *Generator) matches(got flowstate.FlowStateValue, i int, known uint64) bool {
	for _, w := range g.p.flowsOf(nil, i, known-1) {
		size, hasSize := got.StateSize[w.ID]
		last, hasLast := got.LastExecTimeMap[w.ID]
		start, hasStart := got.StartTimeMap[w.ID]
		if known == 0 {
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
// its report known-1 (from no flow, when known is 0).
func (g *Generator) describe(d *differ, got flowstate.FlowStateValue, i int, known uint64) {
	node := g.cfg.FirstNode + i
	for _, w := range g.p.flowsOf(nil, i, known-1) {
		if known == 0 {
			w.Has = 0
		}
		d.field(node, w.ID, "state_size", w.Has&flowstate.HasStateSize != 0, w.StateSize, got.StateSize)
		d.fieldInt(node, w.ID, "last_exec_time_map", w.Has&flowstate.HasLastExecTime != 0, w.LastExecTime, got.LastExecTimeMap)
		d.fieldInt(node, w.ID, "start_time_map", w.Has&flowstate.HasStartTime != 0, w.StartTime, got.StartTimeMap)
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
	d.compare(node, id, name, has, ok, g == want, strconv.FormatUint(want, 10), strconv.FormatUint(g, 10))
}

func (d *differ) fieldInt(node int, id flowstate.FlowID, name string, has bool, want int64, got map[flowstate.FlowID]int64) {
	g, ok := got[id]
	d.compare(node, id, name, has, ok, g == want, strconv.FormatInt(want, 10), strconv.FormatInt(g, 10))
}

// compare adds a line when a field's presence or value differs.
func (d *differ) compare(node int, id flowstate.FlowID, name string, want, got, equal bool, wantV, gotV string) {
	if want == got && (equal || !want) {
		return
	}
	d.add(fmt.Sprintf("flow %d of node %d: %s is %s, want %s", id, node, name, show(got, gotV), show(want, wantV)))
}

func show(present bool, v string) string {
	if !present {
		return "absent"
	}
	return v
}
