package chaos

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/flowstate-io/flowstate/flowstate"
)

// The clients number their reports (numbering), and a get shows which
// report of each node the state holds (markerFlow). A stale report is
// answered 409 and never applied (PROTOCOL.md, "Stale reports"); the
// checks here hold the workers to it.

// olderShown returns the gets (fresh: not the stale ones of splitStale,
// which show an old state by definition) that show, for some node, a
// report older than one of that node acked in the same epoch before the
// get was sent:
//
//   - of the same process (node_epoch) with a lower seq;
//   - or of a process the node moved away from: one of its reports was
//     acked, then, invoked after that ack completed, one of another
//     process of the node (any other: the state does not know which
//     started later), all before the get was sent. (The first report of a
//     process is applied whatever arrived before, so a process none of
//     whose reports was acked before another one's is not retired; and a
//     node remembers flowstate.MaxRetiredEpochs processes: the rule holds
//     while at most that many others may have been applied since.)
//
// A write that erased the node's report from outside (the nemesis's
// corrupt writes: a report of the node without a seq) excuses the acks it
// may have followed, since the state then holds no report of the node,
// and no process it moved away from, to compare a late one with; so does
// another epoch, which starts from its own state.
func olderShown(fresh []op) []string {
	type key struct {
		epoch     string
		node      int
		nodeEpoch uint64
	}
	type ack struct {
		call, ret int64
		seq       uint64
		o         op
	}
	type nodeIn struct {
		epoch string
		node  int
	}
	acks := map[key][]ack{}
	byNode := map[nodeIn][]ack{}  // every ack of a node in an epoch
	var erased [nNodes][][2]int64 // per node, when an erasing write may have taken effect
	for _, o := range fresh {
		if o.in.kind != opReport || o.in.node >= nNodes {
			continue
		}
		switch {
		case o.in.seq == 0 && o.out.status == stOK:
			erased[o.in.node] = append(erased[o.in.node], [2]int64{o.call, o.ret})
		case o.in.seq == 0 && o.out.status == stUnknown:
			erased[o.in.node] = append(erased[o.in.node], [2]int64{o.call, max(o.ret, o.call+int64(lag))})
		case o.out.status == stOK:
			k := key{o.out.epoch, o.in.node, o.in.nodeEpoch}
			acks[k] = append(acks[k], ack{o.call, o.ret, o.in.seq, o})
			byNode[nodeIn{o.out.epoch, o.in.node}] = append(byNode[nodeIn{o.out.epoch, o.in.node}], ack{o.call, o.ret, o.in.seq, o})
		}
	}
	// fewProcesses reports whether at most flowstate.MaxRetiredEpochs
	// processes of node n other than nodeEpoch may have had a report
	// applied from t until the get g (so that the node still remembers
	// nodeEpoch as one it moved away from): those with a report invoked
	// by g's completion and not answered (or past its deadline, as the
	// model's) before t. Only asked of a get about to fail the run.
	after := ackedAfter(fresh)
	fewProcesses := func(n int, nodeEpoch uint64, t int64, g op) bool {
		others := map[uint64]bool{}
		for _, o := range fresh {
			if o.in.kind != opReport || o.in.node != n || o.in.seq == 0 || o.in.nodeEpoch == nodeEpoch || o.call > g.ret {
				continue
			}
			reach := o.ret
			if o.out.status == stUnknown {
				reach = max(o.call+int64(lag), after(o.ret))
			}
			if reach >= t {
				others[o.in.nodeEpoch] = true
			}
		}
		return len(others) <= flowstate.MaxRetiredEpochs
	}
	// since returns the latest end of node n's erasing writes invoked
	// before t: an ack invoked up to it may have been erased.
	since := func(n int, t int64) int64 {
		e := int64(math.MinInt64)
		for _, w := range erased[n] {
			if w[0] < t {
				e = max(e, w[1])
			}
		}
		return e
	}
	// newest returns, of the acks of k invoked after from, the one of the
	// highest seq among those completed before t (ok false if none); by
	// completion, with the running maximum, per (k, from).
	type view struct {
		k    key
		from int64
	}
	views := map[view][]ack{}
	newest := func(k key, from, t int64) (ack, bool) {
		v, ok := views[view{k, from}]
		if !ok {
			for _, a := range acks[k] {
				if a.call > from {
					v = append(v, a)
				}
			}
			slices.SortFunc(v, func(a, b ack) int { return cmp.Compare(a.ret, b.ret) })
			for i := 1; i < len(v); i++ {
				if v[i].seq < v[i-1].seq {
					v[i].seq, v[i].o = v[i-1].seq, v[i-1].o // the newest so far
				}
			}
			views[view{k, from}] = v
		}
		i, _ := slices.BinarySearchFunc(v, t, func(a ack, t int64) int { return cmp.Compare(a.ret, t) })
		if i == 0 {
			return ack{}, false
		}
		return v[i-1], true
	}
	// retired returns the ack of another process of k's node that retired
	// k's process (ok false if none): the first to complete of those
	// invoked after the first ack of k invoked after from completed; and
	// the invocation of that first ack of k. Per (k, from).
	type retiring struct {
		a     ack
		since int64
		ok    bool
	}
	retirings := map[view]retiring{}
	retired := func(k key, from int64) retiring {
		v := view{k, from}
		if r, ok := retirings[v]; ok {
			return r
		}
		var first *ack // the first ack of k invoked after from to complete
		for i, a := range acks[k] {
			if a.call > from && (first == nil || a.ret < first.ret) {
				first = &acks[k][i]
			}
		}
		var r retiring
		for _, a := range byNode[nodeIn{k.epoch, k.node}] {
			if first != nil && a.o.in.nodeEpoch != k.nodeEpoch && a.call > first.ret && (!r.ok || a.ret < r.a.ret) {
				r = retiring{a, first.call, true}
			}
		}
		retirings[v] = r
		return r
	}
	var problems []string
	for _, g := range fresh {
		if g.in.kind != opGet || g.out.status != stOK {
			continue
		}
		for n, m := range g.out.marks {
			if m.seq == 0 {
				continue
			}
			k, from := key{g.out.epoch, n, m.epoch}, since(n, g.ret)
			if a, ok := newest(k, from, g.call); ok && a.seq > m.seq {
				problems = append(problems, fmt.Sprintf("a get shows node %d's report seq %d after its report seq %d of the same process was acked: client %d at %v: %s; the ack: client %d at %v: %s",
					n+1, m.seq, a.seq, g.client, time.Duration(g.call), describeOp(g.in, g.out), a.o.client, time.Duration(a.o.call), describeOp(a.o.in, a.o.out)))
			} else if r := retired(k, from); r.ok && r.a.ret < g.call && fewProcesses(n, m.epoch, r.since, g) {
				problems = append(problems, fmt.Sprintf("a get shows node %d's report of node_epoch %d (seq %d) after one of that process and then one of another process were acked: client %d at %v: %s; the other: client %d at %v: %s",
					n+1, m.epoch, m.seq, g.client, time.Duration(g.call), describeOp(g.in, g.out), r.a.o.client, time.Duration(r.a.o.call), describeOp(r.a.o.in, r.a.o.out)))
			}
			if len(problems) == 5 {
				return problems
			}
		}
	}
	return problems
}

// staleAnswers returns the reports answered 409 that cannot be stale: an
// invalid one (its decoding and fields come first, 400), and a valid one
// of which no report of its node that could make it stale (of its process
// with a higher seq, or of another process, which retires its process once
// applied after it) had been sent by the time it was answered.
func staleAnswers(ops []op) []string {
	type numbered struct {
		node      int
		nodeEpoch uint64
	}
	type sent struct {
		seq  uint64
		call int64
	}
	byProcess := map[numbered][]sent{} // by seq, with the earliest send of that seq or a higher one
	var first [nNodes]map[uint64]int64 // per node, each process's earliest send
	for _, o := range ops {
		if o.in.kind != opReport || o.in.seq == 0 || o.in.node >= nNodes {
			continue
		}
		k := numbered{o.in.node, o.in.nodeEpoch}
		byProcess[k] = append(byProcess[k], sent{o.in.seq, o.call})
		if first[o.in.node] == nil {
			first[o.in.node] = map[uint64]int64{}
		}
		if t, ok := first[o.in.node][o.in.nodeEpoch]; !ok || o.call < t {
			first[o.in.node][o.in.nodeEpoch] = o.call
		}
	}
	for _, s := range byProcess {
		slices.SortFunc(s, func(a, b sent) int { return cmp.Compare(a.seq, b.seq) })
		for i := len(s) - 2; i >= 0; i-- {
			s[i].call = min(s[i].call, s[i+1].call)
		}
	}
	var problems []string
	for _, o := range ops {
		if o.out.status != stStale || len(problems) == 5 {
			continue
		}
		if o.in.kind != opReport {
			problems = append(problems, "an invalid report was answered 409, not 400: "+describeOp(o.in, o.out))
			continue
		}
		if o.in.seq == 0 || o.in.node >= nNodes {
			problems = append(problems, "an unnumbered report was answered 409: "+describeOp(o.in, o.out))
			continue
		}
		explained := false
		for e, t := range first[o.in.node] {
			explained = explained || e != o.in.nodeEpoch && t <= o.ret
		}
		s := byProcess[numbered{o.in.node, o.in.nodeEpoch}]
		if i, _ := slices.BinarySearchFunc(s, o.in.seq+1, func(a sent, t uint64) int { return cmp.Compare(a.seq, t) }); i < len(s) {
			explained = explained || s[i].call <= o.ret
		}
		if !explained {
			problems = append(problems, fmt.Sprintf("a report was answered 409 before a report of its node that could make it stale was sent: client %d at %v: %s",
				o.client, time.Duration(o.call), describeOp(o.in, o.out)))
		}
	}
	return problems
}
