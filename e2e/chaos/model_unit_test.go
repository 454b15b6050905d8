package chaos

import (
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
		v := check(c.ops, nil, lag, 10*time.Second)
		assert.Equal(t, c.want, v.result, c.name)
	}
}
