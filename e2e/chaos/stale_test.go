package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// staleGrace is how long after a nats-server comes back (or a paused worker
// resumes) a JetStream worker may still serve a stale get: the README's
// documented exception, a worker whose read barrier fails answers from its
// last state while JetStream cannot answer, and until its watch catches up.
const staleGrace = 10 * time.Second

// splitStale separates the gets that saw a lower revision than an
// operation of the same epoch that completed before they were invoked:
// a linearizable store never serves those, and this worker does only in
// the documented exception above. The rest of the history is checked for
// linearizability; the stale gets are counted, must fall in an allowed
// window, and must show the state that other gets saw at their revision.
func splitStale(ops []op) (fresh, stale []op) {
	type seen struct {
		ret int64
		rev uint64
	}
	byEpoch := map[string][]seen{}
	for _, o := range ops {
		if o.out.status == stOK && o.in.kind != opInvalid {
			byEpoch[o.out.epoch] = append(byEpoch[o.out.epoch], seen{o.ret, o.out.rev})
		}
	}
	for e, s := range byEpoch {
		slices.SortFunc(s, func(a, b seen) int { return cmp.Compare(a.ret, b.ret) })
		for i := 1; i < len(s); i++ {
			s[i].rev = max(s[i].rev, s[i-1].rev) // the highest revision seen by then
		}
		byEpoch[e] = s
	}
	for _, o := range ops {
		if o.in.kind == opGet && o.out.status == stOK {
			s := byEpoch[o.out.epoch]
			i, _ := slices.BinarySearchFunc(s, o.call, func(x seen, t int64) int { return cmp.Compare(x.ret, t) })
			if i > 0 && s[i-1].rev > o.out.rev {
				stale = append(stale, o)
				continue
			}
		}
		fresh = append(fresh, o)
	}
	return fresh, stale
}

// staleProblems returns the stale gets outside the allowed windows, and
// those whose state differs from a fresh get's at the same revision.
func staleProblems(fresh, stale []op, windows [][2]int64) []string {
	type version struct {
		epoch string
		rev   uint64
	}
	type shown struct {
		agg   report
		marks [nNodes]mark
	}
	states := map[version]shown{}
	for _, o := range fresh {
		if o.in.kind == opGet && o.out.status == stOK {
			states[version{o.out.epoch, o.out.rev}] = shown{o.out.agg, o.out.marks}
		}
	}
	var problems []string
	for _, o := range stale {
		allowed := false
		for _, w := range windows {
			allowed = allowed || o.call >= w[0] && o.call <= w[1]
		}
		if !allowed {
			problems = append(problems, fmt.Sprintf("a stale get outside a JetStream outage: client %d at %v: %s",
				o.client, time.Duration(o.call), describeOp(o.in, o.out)))
		}
		if st, ok := states[version{o.out.epoch, o.out.rev}]; ok && st != (shown{o.out.agg, o.out.marks}) {
			problems = append(problems, fmt.Sprintf("a stale get shows another state than revision %d had: %s",
				o.out.rev, describeOp(o.in, o.out)))
		}
		if len(problems) >= 5 {
			break
		}
	}
	return problems
}
