package chaos

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// The clients number their reports (numbering), and a get shows which
// report of each node the state holds (markerFlow). A stale report is
// answered 409 and never applied (PROTOCOL.md, "Stale reports"); the
// checks here hold the workers to it.

// olderShown returns the gets (fresh: not the stale ones of splitStale,
// which show an old state by definition) that show, for some node, a
// report older than one of that node acked in the same epoch before the
// get was sent: the same node_epoch and a lower seq. A write that erased
// the node's report from outside (the nemesis's corrupt writes: a
// report of the node without a seq) excuses the acks it may have followed,
// since the state then holds no report of the node to compare a late one
// with; so does another epoch, which starts from its own state.
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
	acks := map[key][]ack{}
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
		}
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
	var problems []string
	for _, g := range fresh {
		if g.in.kind != opGet || g.out.status != stOK {
			continue
		}
		for n, m := range g.out.marks {
			if m.seq == 0 {
				continue
			}
			a, ok := newest(key{g.out.epoch, n, m.epoch}, since(n, g.ret), g.call)
			if !ok || a.seq <= m.seq {
				continue
			}
			problems = append(problems, fmt.Sprintf("a get shows node %d's report seq %d after its report seq %d was acked: client %d at %v: %s; the ack: client %d at %v: %s",
				n+1, m.seq, a.seq, g.client, time.Duration(g.call), describeOp(g.in, g.out), a.o.client, time.Duration(a.o.call), describeOp(a.o.in, a.o.out)))
			if len(problems) == 5 {
				return problems
			}
		}
	}
	return problems
}

// staleAnswers returns the reports answered 409 that cannot be stale: an
// invalid one (its decoding and fields come first, 400), and a valid one
// of which no later-numbered report of its node had been sent by the
// time it was answered, so that the state could not hold one.
func staleAnswers(ops []op) []string {
	type sent struct {
		nodeEpoch, seq uint64
		call           int64
	}
	var bySeq [nNodes][]sent
	for _, o := range ops {
		if o.in.kind == opReport && o.in.seq != 0 && o.in.node < nNodes {
			bySeq[o.in.node] = append(bySeq[o.in.node], sent{o.in.nodeEpoch, o.in.seq, o.call})
		}
	}
	for n := range bySeq {
		s := bySeq[n]
		slices.SortFunc(s, func(a, b sent) int { return cmp.Or(cmp.Compare(a.nodeEpoch, b.nodeEpoch), cmp.Compare(a.seq, b.seq)) })
		for i := len(s) - 2; i >= 0; i-- {
			if s[i].nodeEpoch == s[i+1].nodeEpoch {
				s[i].call = min(s[i].call, s[i+1].call) // the earliest send of this seq or a later one
			}
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
		s := bySeq[o.in.node]
		i, _ := slices.BinarySearchFunc(s, sent{o.in.nodeEpoch, o.in.seq + 1, 0}, func(a, t sent) int {
			return cmp.Or(cmp.Compare(a.nodeEpoch, t.nodeEpoch), cmp.Compare(a.seq, t.seq))
		})
		if i == len(s) || s[i].nodeEpoch != o.in.nodeEpoch || s[i].call > o.ret {
			problems = append(problems, fmt.Sprintf("a report was answered 409 before a later one of its node was sent: client %d at %v: %s",
				o.client, time.Duration(o.call), describeOp(o.in, o.out)))
		}
	}
	return problems
}
