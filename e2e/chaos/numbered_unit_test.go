package chaos

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
)

const testNodeEpoch = 1_700_000_000_000

// numberedAck is node index n's report seq, acked in epoch "e" at rev.
func numberedAck(n int, seq uint64, rev uint64, call int64) op {
	return op{client: 1, in: input{kind: opReport, node: n, report: report{{uint16(seq), 1, 1}}, nodeEpoch: testNodeEpoch, seq: seq},
		out: output{status: stOK, epoch: "e", rev: rev}, call: call, ret: call + 10}
}

// getShowing is a get in epoch e at rev that shows node index n's report
// seq (its marker).
func getShowing(e string, rev uint64, n int, seq uint64, call int64) op {
	o := op{client: 2, in: input{kind: opGet}, out: output{status: stOK, epoch: e, rev: rev, agg: report{{uint16(seq), 1, 1}}}, call: call, ret: call + 10}
	o.out.marks[n] = mark{testNodeEpoch, seq}
	return o
}

// A get that shows a node's report older than one of the node acked
// before the get was sent fails the run; one that shows the acked report
// or a later one does not, nor does one sent before the ack completed,
// one in another epoch, nor one after a write that erased the node's
// report from outside.
func TestCheckOlderReportShownAfterAnAck(t *testing.T) {
	ack5 := numberedAck(0, 5, 3, 100)
	erase := op{client: 9, in: input{kind: opReport, node: 0, why: "nemesis: delete node 1's key"}, out: output{status: stOK, epoch: "e", rev: 4}, call: 200, ret: 210}
	other := numberedAck(1, 9, 4, 150)
	for _, c := range []struct {
		name  string
		ops   []op
		fails bool
	}{
		{"an older report after the ack", []op{ack5, getShowing("e", 4, 0, 4, 300)}, true},
		{"an older report after the ack of a later report than the newest", []op{numberedAck(0, 3, 2, 50), ack5, getShowing("e", 4, 0, 2, 300)}, true},
		{"an older report after another node's later ack", []op{ack5, other, getShowing("e", 4, 0, 4, 300)}, true},
		{"the acked report", []op{ack5, getShowing("e", 3, 0, 5, 300)}, false},
		{"a later report", []op{ack5, getShowing("e", 4, 0, 6, 300)}, false},
		{"another node's lower seq", []op{ack5, getShowing("e", 4, 1, 4, 300)}, false},
		{"an older report while the ack is in flight", []op{ack5, getShowing("e", 2, 0, 4, 105)}, false},
		{"an older report in another epoch", []op{ack5, getShowing("f", 1, 0, 4, 300)}, false},
		{"an older report after the node was erased", []op{ack5, erase, getShowing("e", 5, 0, 4, 300)}, false},
		{"an older report after the node was erased, then a later ack", []op{ack5, erase, numberedAck(0, 7, 6, 250), getShowing("e", 7, 0, 4, 300)}, true},
	} {
		problems := olderShown(c.ops)
		if c.fails {
			assert.Len(t, problems, 1, c.name)
		} else {
			assert.Empty(t, problems, c.name)
		}
	}
	got := olderShown([]op{ack5, getShowing("e", 4, 0, 4, 300)})
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "node 1's report seq 4 after its report seq 5 was acked")
}

// A 409 is a problem for an invalid report (400 comes first), an
// unnumbered one, and one answered before any later report of its node
// was sent; it is the protocol when a later-numbered report of its node
// was sent first.
func TestCheckStaleAnswers(t *testing.T) {
	stale := func(kind opKind, seq uint64, call int64) op {
		return op{in: input{kind: kind, node: 0, nodeEpoch: testNodeEpoch, seq: seq}, out: output{status: stStale, code: "409"}, call: call, ret: call + 10}
	}
	later := numberedAck(0, 6, 2, 100)
	for _, c := range []struct {
		name  string
		ops   []op
		fails bool
	}{
		{"overtaken by a later report", []op{later, stale(opReport, 5, 95)}, false},
		{"answered before the later report was sent", []op{stale(opReport, 5, 50), later}, true},
		{"no later report of its node", []op{numberedAck(1, 9, 2, 10), stale(opReport, 5, 95)}, true},
		{"a later report of another process of its node", []op{{in: input{kind: opReport, node: 0, nodeEpoch: testNodeEpoch + 1, seq: 6}, out: output{status: stOK}, call: 10, ret: 20}, stale(opReport, 5, 95)}, true},
		{"an invalid report", []op{later, stale(opInvalid, 1, 95)}, true},
		{"an unnumbered report", []op{later, stale(opReport, 0, 95)}, true},
	} {
		problems := staleAnswers(c.ops)
		if c.fails {
			assert.Len(t, problems, 1, c.name)
		} else {
			assert.Empty(t, problems, c.name)
		}
	}
}

// A numbered report carries its node_epoch and seq and, if it names a flow
// of the model, its node's marker flow; a get's aggregate gives the
// markers back apart from the model's flows.
func TestUnitNumberedReportsAndMarkers(t *testing.T) {
	var d codec.Decoder
	var r codec.Report
	require.NoError(t, d.Decode(encodeReport(2, report{{5, 6, 7}}, testNodeEpoch, 42), &r))
	assert.Equal(t, uint64(3), r.NodeID)
	assert.True(t, r.HasNodeEpoch)
	assert.Equal(t, uint64(testNodeEpoch), r.NodeEpoch)
	assert.True(t, r.Health.HasSeq)
	assert.Equal(t, uint64(42), r.Health.Seq)
	require.Len(t, r.Flows, 2)
	assert.Equal(t, flowstate.FlowID(markerFlow+2), r.Flows[1].ID)

	agg, marks, alien := fromValue(r.Value())
	assert.False(t, alien)
	assert.Equal(t, report{{5, 6, 7}}, agg)
	assert.Equal(t, mark{testNodeEpoch, 42}, marks[2])
	assert.Equal(t, mark{}, marks[0])

	require.NoError(t, d.Decode(encodeReport(2, report{}, testNodeEpoch, 43), &r))
	assert.Empty(t, r.Flows, "an empty report leaves every flow, its marker too")
	assert.Equal(t, uint64(43), r.Health.Seq)

	require.NoError(t, d.Decode(encodeReport(2, report{{5, 6, 7}}, 0, 0), &r))
	assert.False(t, r.HasNodeEpoch || r.Health.HasSeq, "unnumbered")
	assert.Len(t, r.Flows, 1)

	half := flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{markerFlow: 9}}
	_, marks, alien = fromValue(half)
	assert.True(t, alien, "a marker without its node_epoch")
	assert.Equal(t, mark{}, marks[0])
}

// numbering draws seqs per node, strictly increasing across clients.
func TestUnitNumberingPerNode(t *testing.T) {
	nb := &numbering{epoch: testNodeEpoch}
	e, s1 := nb.next(0)
	_, s2 := nb.next(0)
	_, t1 := nb.next(1)
	assert.Equal(t, uint64(testNodeEpoch), e)
	assert.Equal(t, []uint64{1, 2, 1}, []uint64{s1, s2, t1})
}
