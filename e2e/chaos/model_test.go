package chaos

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/anishathalye/porcupine"
)

// state is the model's state in one epoch: every node's last applied
// report with the marker a get shows of it, and the revision. seen is the
// highest revision a get has shown, and nodeRev the revision of each
// node's report if it was acked (0 for one of unknown outcome): a report
// of unknown outcome past its deadline may show only if no get and no
// acked report of its node have passed its bound (pendingOp).
type state struct {
	nodes   [nNodes]report
	marks   [nNodes]mark
	rev     uint64
	seen    uint64
	nodeRev [nNodes]uint64
}

// markOf is the marker a get shows of a report numbered nodeEpoch and seq
// (markerFlow): none for an unnumbered report or one that names no flow of
// the model.
func markOf(r *report, nodeEpoch, seq uint64) mark {
	if seq == 0 || *r == (report{}) {
		return mark{}
	}
	return mark{nodeEpoch, seq}
}

// aggregate is the per-flow, per-field max over the nodes' reports.
func aggregate(nodes *[nNodes]report) report {
	var a report
	for n := range nodes {
		for f := range nFlows {
			for k := range 3 {
				a[f][k] = max(a[f][k], nodes[n][f][k])
			}
		}
	}
	return a
}

// covered reports whether r is at most agg in every field.
func covered(r, agg *report) bool {
	for f := range nFlows {
		for k := range 3 {
			if r[f][k] > agg[f][k] {
				return false
			}
		}
	}
	return true
}

// pendingOp is a report of unknown outcome (no answer, or 5xx), or one
// acked in another epoch: it may take effect at one instant between its
// invocation and its deadline, or never. (A report acked in the old epoch
// as the bucket is purged may be stored after the purge, and so be in the
// new epoch's state, which then does not start empty.)
type pendingOp struct {
	epoch    string // acked in this epoch ("": unknown outcome)
	rev      uint64 // acked at this revision
	node     int
	report   report
	mark     mark // what a get shows of it (markOf)
	call     int64
	deadline int64
	// A report of unknown outcome that took effect did so before its
	// deadline, so at a revision at most bound, the least revision of the
	// operations of the epoch invoked after the deadline (candidates sets
	// both per epoch). A get past the deadline may still show it, as long
	// as the state it is applied to is below bound; until is when an
	// operation at bound or above has completed, after which no get may.
	bound uint64
	until int64
	// kept: a report sent before a fault that rolled every store back,
	// candidate in the kept epoch that follows it. A kept epoch starts
	// from what the store held, an older state: each node's report in it
	// is one its clients sent before the fault, or none, until a report
	// of the node is acked in the epoch.
	kept bool
}

// keptSuffix ends the name of an epoch that a worker began because the
// store forgot acknowledged writes: it starts from what the store held
// (kv/jetstream).
const keptSuffix = "-kept"

// model is the worker's specification. A get returns the aggregate at one
// instant with its revision; an acked report takes effect at one instant
// with a greater revision; a report of unknown outcome may take effect
// once before its deadline, or never; an acked invalid report is
// impossible. Rejected reports and failed gets change nothing and are not
// in the history.
//
// Reports of unknown outcome are not operations of the history that the
// search must place: they are the model's table, and a get that does not
// match the state may apply those that were in flight (each node's report
// replaced by one of them). Placing hundreds of them (a JetStream outage
// answers 503 at once) would make the search exponential; this keeps it
// linear. It is permissive on revisions while one is in flight (a get may
// then see a higher revision than the last write it knows of).
type model struct {
	table []pendingOp            // by invocation
	cands map[string][]pendingOp // per epoch, those of table that may take effect in it, by invocation
	reach map[string][]int64     // per epoch, the running max of cands' deadlines
	acks  map[string][]uint64    // per epoch, the revisions of acked reports, ascending
	lag   int64
}

func (m *model) step(st, in, out any) []any {
	s, i, o := st.(state), in.(input), out.(output)
	switch {
	case i.kind == opGet:
		return m.get(s, i, o)
	case i.kind == opInvalid || o.alien:
		return nil
	case o.rev <= s.rev || m.ackedBetween(o.epoch, s.rev, o.rev-1):
		return nil
	default:
		if i.node < nNodes { // else a ballast node's, outside the model
			s.nodes[i.node], s.marks[i.node], s.nodeRev[i.node] = i.report, markOf(&i.report, i.nodeEpoch, i.seq), o.rev
		}
		s.rev = o.rev
		return []any{s}
	}
}

// ackedBetween reports whether a report of epoch was acked at a revision in
// (lo, hi]: a write that a state at hi includes, and at lo does not. A
// step that passes over it before it is linearised cannot be right (the
// search would otherwise explain the state with reports in flight).
func (m *model) ackedBetween(epoch string, lo, hi uint64) bool {
	revs := m.acks[epoch]
	i, _ := slices.BinarySearch(revs, lo+1)
	return i < len(revs) && revs[i] <= hi
}

// inFlight returns the reports that may take effect in epoch while the get
// i runs: those of unknown outcome and those acked in another epoch. It
// returns a window of the candidates, shared: those in it whose until is
// before the get's invocation are not in flight (live).
func (m *model) inFlight(i input, epoch string) []pendingOp {
	c, reach := m.cands[epoch], m.reach[epoch]
	hi, _ := slices.BinarySearchFunc(c, i.ret+1, func(p pendingOp, t int64) int { return cmp.Compare(p.call, t) })
	lo, _ := slices.BinarySearch(reach[:hi], i.call) // reach ascends
	return c[lo:hi]
}

// live reports whether p may take effect during the get i (inFlight).
func live(p *pendingOp, i input) bool { return p.until >= i.call }

// reaches returns, per epoch, the latest deadline of its candidates up to
// each one: deadlines do not grow with invocations.
func reaches(cands map[string][]pendingOp) map[string][]int64 {
	out := make(map[string][]int64, len(cands))
	for e, c := range cands {
		r := make([]int64, len(c))
		for j, p := range c {
			r[j] = p.until
			if j > 0 {
				r[j] = max(r[j], r[j-1])
			}
		}
		out[e] = r
	}
	return out
}

// candidates returns, per epoch of the history h, the reports of table
// that may take effect in it: those invoked up to its last operation whose
// deadline is not before its first one (for a memory worker's epoch, those
// invoked from its start), and not acked in it. In a kept epoch (its name
// ends with keptSuffix) whose first operation follows a fault that rolled
// every store back (forgets: when each began), every report sent before
// the last such fault is one too, kept.
func candidates(h []porcupine.Operation, table []pendingOp, opens map[string]int64, forgets []int64) map[string][]pendingOp {
	type span struct{ first, last int64 }
	spans := map[string]*span{}
	for _, o := range h {
		e := o.Output.(output).epoch
		if sp := spans[e]; sp == nil {
			spans[e] = &span{o.Call, o.Return}
		} else {
			sp.first, sp.last = min(sp.first, o.Call), max(sp.last, o.Return)
		}
	}
	out := map[string][]pendingOp{}
	for e, sp := range spans {
		open, opened := opens[e]
		forgot := int64(math.MinInt64) // reports sent before it are kept candidates
		if strings.HasSuffix(e, keptSuffix) {
			for _, f := range forgets {
				if f <= sp.first {
					forgot = max(forgot, f)
				}
			}
		}
		var c []pendingOp
		for _, p := range table {
			if p.call > sp.last {
				break
			}
			if p.epoch != e && p.call < forgot {
				p.kept = true
				c = append(c, p)
				continue
			}
			if p.epoch == e || (opened && p.call < open) || (!opened && p.deadline < sp.first) {
				continue
			}
			c = append(c, p)
		}
		out[e] = extend(c, h, e)
	}
	return out
}

// extend sets bound and until of the candidates c of epoch e, whose
// operations are in h: until is the earliest completion of a get, or of
// an acked report of the candidate's node, at bound or above.
func extend(c []pendingOp, h []porcupine.Operation, e string) []pendingOp {
	type seen struct {
		call, ret int64
		rev       uint64
	}
	var ops, gets []seen
	acks := map[int][]seen{}
	for _, o := range h {
		out := o.Output.(output)
		if out.epoch != e {
			continue
		}
		x := seen{o.Call, o.Return, out.rev}
		ops = append(ops, x)
		switch in := o.Input.(input); in.kind {
		case opGet:
			gets = append(gets, x)
		case opReport:
			acks[in.node] = append(acks[in.node], x)
		}
	}
	slices.SortFunc(ops, func(a, b seen) int { return cmp.Compare(a.call, b.call) })
	least := make([]uint64, len(ops)+1) // least[i]: the least revision of ops[i:]
	least[len(ops)] = math.MaxUint64
	for i := len(ops) - 1; i >= 0; i-- {
		least[i] = min(least[i+1], ops[i].rev)
	}
	// first returns the earliest completion of xs (by completion, with the
	// running max of revisions in most) at revision r or above.
	byRet := func(xs []seen) func(r uint64) int64 {
		slices.SortFunc(xs, func(a, b seen) int { return cmp.Compare(a.ret, b.ret) })
		most := make([]uint64, len(xs))
		for i, x := range xs {
			most[i] = x.rev
			if i > 0 {
				most[i] = max(most[i], most[i-1])
			}
		}
		return func(r uint64) int64 {
			i, _ := slices.BinarySearch(most, r)
			if i == len(xs) {
				return math.MaxInt64
			}
			return xs[i].ret
		}
	}
	firstGet := byRet(gets)
	firstAck := map[int]func(uint64) int64{}
	for n, a := range acks {
		firstAck[n] = byRet(a)
	}
	for j := range c {
		p := &c[j]
		if p.kept { // any time, until its node's report is acked in the epoch (get)
			p.bound, p.until = math.MaxUint64, math.MaxInt64
			continue
		}
		i, _ := slices.BinarySearchFunc(ops, p.deadline+1, func(s seen, t int64) int { return cmp.Compare(s.call, t) })
		p.bound, p.until = least[i], math.MaxInt64
		if p.bound == math.MaxUint64 {
			continue
		}
		p.until = firstGet(p.bound)
		if f := firstAck[p.node]; f != nil {
			p.until = min(p.until, f(p.bound))
		}
		p.until = max(p.until, p.deadline)
	}
	return c
}

// maxChoices bounds the successors of one get.
const maxChoices = 64

// get returns the states in which get i may see o.
func (m *model) get(s state, i input, o output) []any {
	if o.alien || o.rev < s.rev || m.ackedBetween(o.epoch, s.rev, o.rev) {
		return nil
	}
	flight := m.inFlight(i, o.epoch)
	anyLive := false
	for j := range flight {
		if anyLive = live(&flight[j], i); anyLive {
			break
		}
	}
	if aggregate(&s.nodes) == o.agg && s.marks == o.marks && (o.rev == s.rev || anyLive) {
		s.rev, s.seen = o.rev, o.rev
		return []any{s}
	}
	if !anyLive {
		return nil
	}
	// Per node, what it may hold: its report (-1) or one in flight (the
	// latest first), within the aggregate and with the marker the get shows
	// of the node (which names the very report when it is numbered); of
	// those that reach the same fields of the aggregate, the first. The
	// nodes together must reach every field.
	var need uint16
	for f := range nFlows {
		for k := range 3 {
			if o.agg[f][k] > 0 {
				need |= 1 << (f*3 + k)
			}
		}
	}
	type option struct {
		j    int // index in flight, -1: the node's report
		hits uint16
	}
	var opts [nNodes][]option
	add := func(n, j int, r *report, mk mark) {
		if mk != o.marks[n] || !covered(r, &o.agg) {
			return
		}
		h := hits(r, &o.agg)
		for _, x := range opts[n] {
			if x.hits == h {
				return
			}
		}
		opts[n] = append(opts[n], option{j, h})
	}
	for n := range nNodes {
		add(n, -1, &s.nodes[n], s.marks[n])
	}
	for j := len(flight) - 1; j >= 0; j-- {
		p := &flight[j]
		// Past its deadline, a report shows only on a state below its
		// bound; a ballast node's is not the model's.
		// A kept one stands for the node's report until one of its
		// reports is acked in the epoch.
		if !live(p, i) || p.node >= nNodes || i.call > p.deadline && (s.seen >= p.bound || s.nodeRev[p.node] >= p.bound) ||
			p.kept && s.nodeRev[p.node] > 0 {
			continue
		}
		add(p.node, j, &p.report, p.mark)
	}
	var reach [nNodes + 1]uint16
	for n := nNodes - 1; n >= 0; n-- {
		reach[n] = reach[n+1]
		for _, x := range opts[n] {
			reach[n] |= x.hits
		}
	}
	var out []any
	var choice [nNodes]int
	var walk func(n int, got uint16)
	walk = func(n int, got uint16) {
		if len(out) >= maxChoices || need&^(got|reach[n]) != 0 {
			return
		}
		if n == nNodes {
			next, used := s, false
			for n, j := range choice {
				if j >= 0 {
					next.nodes[n], next.marks[n], next.nodeRev[n], used = flight[j].report, flight[j].mark, 0, true
				}
			}
			if used {
				next.rev, next.seen = o.rev, o.rev
				out = append(out, next)
			}
			return
		}
		for _, x := range opts[n] {
			choice[n] = x.j
			walk(n+1, got|x.hits)
		}
	}
	walk(0, 0)
	return out
}

// hits returns the fields in which r equals the aggregate agg (non-zero).
func hits(r, agg *report) uint16 {
	var h uint16
	for f := range nFlows {
		for k := range 3 {
			if agg[f][k] > 0 && r[f][k] == agg[f][k] {
				h |= 1 << (f*3 + k)
			}
		}
	}
	return h
}

var hashSeed = maphash.MakeSeed()

// hashState hashes a state's bytes (it holds no pointer and no padding).
func hashState(s any) uint64 {
	st := s.(state)
	return maphash.Bytes(hashSeed, unsafe.Slice((*byte)(unsafe.Pointer(&st)), unsafe.Sizeof(st)))
}

// newModel is the model with its partition by epoch.
func newModel(h []porcupine.Operation, table []pendingOp, opens map[string]int64, forgets []int64, lag int64) porcupine.Model {
	m := &model{table: table, cands: candidates(h, table, opens, forgets), lag: lag, acks: map[string][]uint64{}}
	m.reach = reaches(m.cands)
	for _, p := range table {
		if p.epoch != "" {
			m.acks[p.epoch] = append(m.acks[p.epoch], p.rev)
		}
	}
	for _, revs := range m.acks {
		slices.Sort(revs)
	}
	nm := porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []any { return []any{state{}} },
		Step:      m.step,
		Hash:      hashState,
		DescribeOperation: func(in, out any) string {
			return describeOp(in.(input), out.(output))
		},
		DescribeState: func(s any) string {
			st := s.(state)
			return fmt.Sprintf("rev %d agg %s", st.rev, describeReport(aggregate(&st.nodes)))
		},
	}
	return nm.ToModel()
}

// partition splits the history by the epoch each operation observed; the
// model starts empty in each one (a kept epoch's older state comes from
// its kept candidates). (Reports of unknown outcome are in the
// model's table, which knows which epochs they may take effect in.)
func partition(h []porcupine.Operation) [][]porcupine.Operation {
	type span struct {
		first int64
		ops   []porcupine.Operation
	}
	spans := map[string]*span{}
	var parts []*span
	for _, o := range h {
		e := o.Output.(output).epoch
		sp := spans[e]
		if sp == nil {
			sp = &span{first: o.Call}
			spans[e] = sp
			parts = append(parts, sp)
		}
		sp.first = min(sp.first, o.Call)
		sp.ops = append(sp.ops, o)
	}
	slices.SortFunc(parts, func(a, b *span) int { return cmp.Compare(a.first, b.first) })
	out := make([][]porcupine.Operation, len(parts))
	for i, sp := range parts {
		out[i] = sp.ops
	}
	return out
}

// operations converts the recorded history into porcupine's (answered
// gets, acked reports, acked invalid reports) and the model's table of
// reports of unknown outcome. A report answered 409 is in neither: it
// changed nothing, and a get that shows it is a violation.
//
// A report of unknown outcome (a timeout or a 5xx) may take effect within
// lag of its invocation, or later, but before the first report that was
// invoked after its answer (or its timeout) is acked, or never. That is
// the README's contract ("What a flownode can rely on"): a report that a
// stalled link held may be applied as long as the link held it, even after
// a later acked report of its node (lag is above the longest partition of
// the nemesis, and a server closes a link silent for longer); and a write
// the stream leader took but did not commit before it died is committed by
// the next leader before anything that leader stores, or never (a
// JetStream outage can make that much longer than lag).
func operations(ops []op, lag int64) ([]porcupine.Operation, []pendingOp) {
	var h []porcupine.Operation
	var table []pendingOp
	after := ackedAfter(ops)
	for _, o := range ops {
		o.in.call = o.call
		switch {
		case o.out.status == stOK:
			o.in.ret = o.ret
			h = append(h, porcupine.Operation{ClientId: o.client, Input: o.in, Call: o.call, Output: o.out, Return: o.ret})
			if o.in.kind == opReport {
				table = append(table, pendingOp{epoch: o.out.epoch, rev: o.out.rev, node: o.in.node, report: o.in.report,
					mark: markOf(&o.in.report, o.in.nodeEpoch, o.in.seq), call: o.call, deadline: o.call + lag})
			}
		case o.out.status == stUnknown && o.in.kind == opReport:
			table = append(table, pendingOp{node: o.in.node, report: o.in.report, mark: markOf(&o.in.report, o.in.nodeEpoch, o.in.seq),
				call: o.call, deadline: max(o.call+lag, after(o.ret))})
		}
	}
	slices.SortFunc(table, func(a, b pendingOp) int { return cmp.Compare(a.call, b.call) })
	return h, table
}

// ackedAfter returns a function of a time t: the earliest completion of an
// acked report invoked after t (math.MaxInt64 if there is none).
func ackedAfter(ops []op) func(t int64) int64 {
	type ack struct{ call, ret int64 }
	var acks []ack
	for _, o := range ops {
		if o.out.status == stOK && o.in.kind == opReport {
			acks = append(acks, ack{o.call, o.ret})
		}
	}
	slices.SortFunc(acks, func(a, b ack) int { return cmp.Compare(a.call, b.call) })
	first := make([]int64, len(acks)+1) // first[i]: the earliest ret of acks[i:]
	first[len(acks)] = math.MaxInt64
	for i := len(acks) - 1; i >= 0; i-- {
		first[i] = min(first[i+1], acks[i].ret)
	}
	return func(t int64) int64 {
		i, _ := slices.BinarySearchFunc(acks, t+1, func(a ack, t int64) int { return cmp.Compare(a.call, t) })
		return first[i]
	}
}
