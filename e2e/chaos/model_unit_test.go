package chaos

import (
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
)

// The model on small histories: an acked report missing from a later get
// is a violation; a report answered 503 that shows up later is not, unless
// a get past its deadline (lag, and the ack of a report invoked after its
// answer) showed a state without it.
func TestModelOnSmallHistories(t *testing.T) {
	r, s := report{{5, 6, 7}}, report{{1, 1, 1}, {2, 2, 2}}
	late := 10 + int64(lag) + int64(time.Second)
	ackS := op{in: input{kind: opReport, node: 1, report: s}, out: output{status: stOK, epoch: "e", rev: 2}, call: 30, ret: 40}
	seenS := op{in: input{kind: opGet}, out: output{status: stOK, epoch: "e", rev: 2, agg: s}, call: 50, ret: 60}
	both := report{{5, 6, 7}, {2, 2, 2}}
	seenLate := op{in: input{kind: opGet}, out: output{status: stOK, epoch: "e", rev: 3, agg: r}, call: late, ret: late + 10}
	seenBothLate := op{in: input{kind: opGet}, out: output{status: stOK, epoch: "e", rev: 3, agg: both}, call: late, ret: late + 10}
	notSeenLate := op{in: input{kind: opGet}, out: output{status: stOK, epoch: "e", rev: 2, agg: s}, call: late, ret: late + 10}
	seenBothLater := op{in: input{kind: opGet}, out: output{status: stOK, epoch: "e", rev: 3, agg: both}, call: late + 20, ret: late + 30}
	ack := op{in: input{kind: opReport, node: 0, report: r}, out: output{status: stOK, epoch: "e", rev: 3}, call: 10, ret: 20}
	unknown := op{in: input{kind: opReport, node: 0, report: r}, out: output{status: stUnknown, code: "503"}, call: 10, ret: 20}
	empty := op{in: input{kind: opGet}, out: output{status: stOK, epoch: "e", rev: 0}, call: 30, ret: 40}
	seen := op{in: input{kind: opGet}, out: output{status: stOK, epoch: "e", rev: 3, agg: r}, call: 30, ret: 40}
	for _, c := range []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"acked then seen", []op{ack, seen}, porcupine.Ok},
		{"acked then lost", []op{ack, empty}, porcupine.Illegal},
		{"503 then seen", []op{unknown, seen}, porcupine.Ok},
		{"503 then not seen", []op{unknown, empty}, porcupine.Ok},
		{"503 seen past lag, nothing acked since", []op{unknown, seenLate}, porcupine.Ok},
		{"503 seen past lag, no get past lag before", []op{unknown, ackS, seenS, seenBothLate}, porcupine.Ok},
		{"503 seen past lag, after a get past lag did not see it", []op{unknown, ackS, seenS, notSeenLate, seenBothLater}, porcupine.Illegal},
		{"503 seen within lag, after a later report was acked", []op{unknown, ackS, seenS, {in: input{kind: opGet}, out: output{status: stOK, epoch: "e", rev: 3, agg: both}, call: 70, ret: 80}}, porcupine.Ok},
		{"ack revision goes back", []op{ack, seen, {in: input{kind: opReport, node: 1}, out: output{status: stOK, epoch: "e", rev: 2}, call: 50, ret: 60}}, porcupine.Illegal},
		{"another epoch starts empty", []op{ack, {in: input{kind: opGet}, out: output{status: stOK, epoch: "f", rev: 0}, call: 30, ret: 40}}, porcupine.Ok},
	} {
		v := check(c.ops, nil, nil, lag, 10*time.Second)
		assert.Equal(t, c.want, v.result, c.name)
	}
}

// A kept epoch after every store was rolled back starts from an older
// state: an acked report may vanish across it, and each node's report in
// it is one its clients sent before the fault, or none. Without such a
// fault, or within one epoch, the same vanishing is a violation; so are a
// report never sent, and a revision going back, in a kept epoch.
func TestModelKeptEpochAfterAForgetFault(t *testing.T) {
	past := 10 * int64(lag) // well past any deadline
	r1, r2, r3 := report{{1, 1, 1}}, report{{2, 2, 2}}, report{{3, 3, 3}}
	s := report{{0, 0, 0}, {4, 4, 4}}
	ackAt := func(node int, r report, epoch string, rev uint64, at int64) op {
		return op{in: input{kind: opReport, node: node, report: r}, out: output{status: stOK, epoch: epoch, rev: rev}, call: at, ret: at + 10}
	}
	getAt := func(epoch string, rev uint64, agg report, at int64) op {
		return op{in: input{kind: opGet}, out: output{status: stOK, epoch: epoch, rev: rev, agg: agg}, call: at, ret: at + 10}
	}
	snapshotted := []op{ackAt(0, r1, "e", 1, 10), ackAt(0, r2, "e", 2, 100), ackAt(0, r3, "e", 3, 200), getAt("e", 3, r3, 300)}
	forgot := past // the rollback began
	kept := "f" + keptSuffix
	both := report{{2, 2, 2}, {4, 4, 4}}
	for _, c := range []struct {
		name    string
		ops     []op
		forgets []int64
		want    porcupine.CheckResult
	}{
		{"an older report after a forget fault", append(slices.Clone(snapshotted), getAt(kept, 5, r2, 2*past)), []int64{forgot}, porcupine.Ok},
		{"no report after a forget fault", append(slices.Clone(snapshotted), getAt(kept, 5, report{}, 2*past)), []int64{forgot}, porcupine.Ok},
		{"an older report, then an ack in the kept epoch", append(slices.Clone(snapshotted), getAt(kept, 5, r2, 2*past),
			ackAt(1, s, kept, 6, 2*past+100), getAt(kept, 6, both, 2*past+200)), []int64{forgot}, porcupine.Ok},
		{"the older report again after its node's ack in the kept epoch", append(slices.Clone(snapshotted), getAt(kept, 5, r2, 2*past),
			ackAt(0, s, kept, 6, 2*past+100), getAt(kept, 7, both, 2*past+200)), []int64{forgot}, porcupine.Illegal},
		{"an older report without a forget fault", append(slices.Clone(snapshotted), getAt(kept, 5, r2, 2*past)), nil, porcupine.Illegal},
		{"an older report in a kept epoch before the forget fault", append(slices.Clone(snapshotted), getAt(kept, 5, r2, 2*past)), []int64{3 * past}, porcupine.Illegal},
		{"an older report in an epoch not kept", append(slices.Clone(snapshotted), getAt("f", 5, r2, 2*past)), []int64{forgot}, porcupine.Illegal},
		{"an older report within one epoch", append(slices.Clone(snapshotted), getAt("e", 5, r2, 2*past)), []int64{forgot}, porcupine.Illegal},
		{"a report never sent after a forget fault", append(slices.Clone(snapshotted), getAt(kept, 5, report{{9, 9, 9}}, 2*past)), []int64{forgot}, porcupine.Illegal},
		{"a revision going back in a kept epoch", append(slices.Clone(snapshotted), getAt(kept, 5, r2, 2*past), getAt(kept, 4, r2, 2*past+100)), []int64{forgot}, porcupine.Illegal},
	} {
		v := check(c.ops, nil, c.forgets, lag, 10*time.Second)
		assert.Equal(t, c.want, v.result, c.name)
	}
}

// Two gets at one epoch and revision that show two states are a problem,
// in a kept epoch too.
func TestModelTwoStatesAtOneRevision(t *testing.T) {
	get := func(epoch string, agg report, at int64) op {
		return op{in: input{kind: opGet}, out: output{status: stOK, epoch: epoch, rev: 5, agg: agg}, call: at, ret: at + 10}
	}
	kept := "f" + keptSuffix
	assert.Len(t, twoStates([]op{get(kept, report{{1, 1, 1}}, 10), get(kept, report{{2, 2, 2}}, 30)}), 1)
	assert.Empty(t, twoStates([]op{get(kept, report{{1, 1, 1}}, 10), get("e", report{{2, 2, 2}}, 30)}))
}

// A report answered 409 changed nothing: a get that shows it is a
// violation, one that does not is not, and a later-numbered report of its
// node that overtook it is what the state holds.
func TestModelStaleReportIsNotApplied(t *testing.T) {
	r, later := report{{5, 6, 7}}, report{{8, 8, 8}}
	stale := op{client: 1, in: input{kind: opReport, node: 0, report: r, nodeEpoch: testNodeEpoch, seq: 1}, out: output{status: stStale, code: "409"}, call: 10, ret: 40}
	overtook := op{client: 2, in: input{kind: opReport, node: 0, report: later, nodeEpoch: testNodeEpoch, seq: 2}, out: output{status: stOK, epoch: "e", rev: 1}, call: 20, ret: 30}
	get := func(agg report, rev uint64, seq uint64) op { return numberedGet(agg, rev, seq, 50) }
	for _, c := range []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"overtaken, the later one held", []op{overtook, stale, get(later, 1, 2)}, porcupine.Ok},
		{"overtaken, yet shown", []op{overtook, stale, get(r, 2, 1)}, porcupine.Illegal},
		{"409 and not shown", []op{stale, get(report{}, 0, 0)}, porcupine.Ok},
		{"409 and shown", []op{stale, get(r, 1, 1)}, porcupine.Illegal},
	} {
		v := check(c.ops, nil, nil, lag, 10*time.Second)
		assert.Equal(t, c.want, v.result, c.name)
	}
}

// A get's markers name the numbered report of each node that it shows, so
// the model applies that one of a node's reports in flight, not another
// that fits the aggregate as well: a later get that needs its values finds
// it held, though it may no longer take effect then. A marker the state
// cannot hold is a violation, even with the aggregate right.
func TestModelAGetsMarkerNamesTheReportItShows(t *testing.T) {
	late := 10 + int64(lag) + int64(time.Second) // past both reports' deadline
	big, shown, other := report{{9, 9, 9}}, report{{1, 2, 3}}, report{{1, 1, 1}}
	numbered := func(r report, seq uint64, call int64) op {
		return op{client: int(seq), in: input{kind: opReport, node: 0, report: r, nodeEpoch: testNodeEpoch, seq: seq},
			out: output{status: stUnknown, code: "503"}, call: call, ret: call + 10}
	}
	first, second := numbered(shown, 1, 10), numbered(other, 2, 12)
	ackBig := op{client: 5, in: input{kind: opReport, node: 1, report: big}, out: output{status: stOK, epoch: "e", rev: 3}, call: 25, ret: 30}
	ackNone := op{client: 5, in: input{kind: opReport, node: 1}, out: output{status: stOK, epoch: "e", rev: 6}, call: late + 20, ret: late + 30}
	get := numberedGet
	for _, c := range []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"the first shown, then needed", []op{first, second, ackBig, get(big, 5, 1, late), ackNone, get(shown, 6, 1, late+40)}, porcupine.Ok},
		{"the second shown, then the first needed", []op{first, second, ackBig, get(big, 5, 2, late), ackNone, get(shown, 6, 1, late+40)}, porcupine.Illegal},
		{"a marker no report carries", []op{first, second, ackBig, get(big, 5, 7, late)}, porcupine.Illegal},
	} {
		v := check(c.ops, nil, nil, lag, 10*time.Second)
		assert.Equal(t, c.want, v.result, c.name)
	}
}

// numberedGet is a get invoked at at that shows the aggregate agg at
// revision rev of epoch "e", with the marker of node 0's report numbered
// testNodeEpoch and seq (markerFlow; none for seq 0), as a get of a
// numbered report shows it.
func numberedGet(agg report, rev, seq uint64, at int64) op {
	o := op{client: 3, in: input{kind: opGet}, out: output{status: stOK, epoch: "e", rev: rev, agg: agg}, call: at, ret: at + 10}
	if seq != 0 {
		o.out.marks[0] = mark{testNodeEpoch, seq}
	}
	return o
}
