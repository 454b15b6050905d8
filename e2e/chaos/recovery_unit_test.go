package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Recovery counts from a fault's heal to the first ack, fresh get and
// update after it, and stops at the next fault's start.
func TestRecoveriesCountFromTheHealToTheNextFault(t *testing.T) {
	s := int64(time.Second)
	evs := []event{{start: 0, heal: 2 * s, end: 2 * s, kind: "partition"}, {start: 5 * s, heal: 6 * s, end: 6 * s, kind: "process"}}
	ack := func(at int64) op {
		return op{client: 1, in: input{kind: opReport}, out: output{status: stOK}, call: at - s/10, ret: at}
	}
	get := func(at int64) op {
		return op{client: 2, in: input{kind: opGet}, out: output{status: stOK}, call: at - s/10, ret: at}
	}
	nemesisWrite := op{client: 9, in: input{kind: opReport}, out: output{status: stOK}, ret: 2*s + 1}
	ops := []op{ack(s), nemesisWrite, ack(3 * s), get(4 * s), ack(6*s + s/2), get(7 * s)}
	rs := recoveries(evs, ops, []int64{6*s + s/4}, 9, 10*s)
	assert.Equal(t, [nMeasures]time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, rs[0].took)
	assert.Equal(t, [nMeasures]bool{false, false, true}, rs[0].never, "no update before the next fault")
	assert.Equal(t, [nMeasures]time.Duration{time.Second / 2, time.Second, time.Second / 4}, rs[1].took)
	lines, worst, took := summarize(rs)
	assert.Len(t, lines, 2)
	assert.True(t, strings.HasPrefix(lines[0], "partition (1): ack p50 1s"), lines[0])
	assert.Contains(t, lines[0], "(1 not before the next fault)")
	assert.Equal(t, 3*time.Second, took)
	assert.Equal(t, "3s (partition, flow.state)", worst)
}
