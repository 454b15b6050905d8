package chaos

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

const testNodeEpoch = 1_700_000_000_000

// numberedAck is node index n's report seq, acked in epoch "e" at rev.
func numberedAck(n int, seq uint64, rev uint64, call int64) op {
	return processAck(n, testNodeEpoch, seq, rev, call)
}

// processAck is node index n's report seq of process nodeEpoch, acked in
// epoch "e" at rev.
func processAck(n int, nodeEpoch, seq uint64, rev uint64, call int64) op {
	return op{client: 1, in: input{kind: opReport, node: n, report: report{{uint16(seq), 1, 1}}, nodeEpoch: nodeEpoch, seq: seq},
		out: output{status: stOK, epoch: "e", rev: rev}, call: call, ret: call + 10}
}

// getShowing is a get in epoch e at rev that shows node index n's report
// seq (its marker).
func getShowing(e string, rev uint64, n int, seq uint64, call int64) op {
	return getShowingProcess(e, rev, n, testNodeEpoch, seq, call)
}

// getShowingProcess is a get in epoch e at rev that shows node index n's
// report seq of process nodeEpoch.
func getShowingProcess(e string, rev uint64, n int, nodeEpoch, seq uint64, call int64) op {
	o := op{client: 2, in: input{kind: opGet}, out: output{status: stOK, epoch: e, rev: rev, agg: report{{uint16(seq), 1, 1}}}, call: call, ret: call + 10}
	o.out.marks[n] = mark{nodeEpoch, seq}
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
	assert.Contains(t, got[0], "node 1's report seq 4 after its report seq 5 of the same process was acked")
}

// A get that shows a report of a node's process after a report of that
// process was acked and then, invoked after, one of another process of the
// node (later or earlier: a paused process that resumed), fails the run:
// the node moved away from it. One does not if no
// report of the process was acked before the later one was sent (the first
// report of a process is applied whatever arrived before), if the two
// acks overlap, if the get was sent before the later ack completed, if a
// write erased the node's report in between, or if more processes of the
// node than the worker remembers may have been applied since.
func TestCheckReportOfARetiredProcessShownAfterAnotherOnesAck(t *testing.T) {
	const e1, e2 = testNodeEpoch, testNodeEpoch + 1
	old := processAck(0, e1, 5, 2, 100) // [100, 110]
	later := processAck(0, e2, 1, 3, 200)
	shows := func(seq uint64, call int64) op { return getShowingProcess("e", 4, 0, e1, seq, call) }
	erase := op{client: 9, in: input{kind: opReport, node: 0, why: "nemesis: delete node 1's key"}, out: output{status: stOK, epoch: "e", rev: 4}, call: 150, ret: 160}
	// inFlight returns reports of n more processes of node index 0 whose
	// outcome is unknown, sent at 120.
	inFlight := func(n int) []op {
		var out []op
		for i := range n {
			out = append(out, op{client: 3, in: input{kind: opReport, node: 0, nodeEpoch: e2 + 1 + uint64(i), seq: 1}, out: output{status: stUnknown, code: "timeout"}, call: 120, ret: 130})
		}
		return out
	}
	for _, c := range []struct {
		name  string
		ops   []op
		fails bool
	}{
		{"the acked report of the old process", []op{old, later, shows(5, 300)}, true},
		{"the acked report of a process after one of an earlier process", []op{old, processAck(0, e1-1, 9, 3, 200), shows(5, 300)}, true},
		{"a later report of the old process", []op{old, later, shows(6, 300)}, true},
		{"seven more processes in flight", append([]op{old, later}, append(inFlight(7), shows(6, 300))...), true},
		{"no report of the old process acked before", []op{later, shows(3, 300)}, false},
		{"the later ack sent before the old one completed", []op{old, processAck(0, e2, 1, 3, 105), shows(5, 300)}, false},
		{"the get sent before the later ack completed", []op{old, later, shows(5, 205)}, false},
		{"the node erased in between", []op{old, erase, later, shows(5, 300)}, false},
		{"eight more processes in flight", append([]op{old, later}, append(inFlight(8), shows(6, 300))...), false},
		{"another epoch", []op{old, later, getShowingProcess("f", 1, 0, e1, 5, 300)}, false},
	} {
		problems := olderShown(c.ops)
		if c.fails {
			assert.Len(t, problems, 1, c.name)
		} else {
			assert.Empty(t, problems, c.name)
		}
	}
	got := olderShown([]op{old, later, shows(5, 300)})
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "node 1's report of node_epoch 1700000000000 (seq 5) after one of that process and then one of another process were acked")
}

// A 409 is a problem for an invalid report (400 comes first), an
// unnumbered one, and one answered before any report of its node that
// could make it stale was sent; it is the protocol when one was sent
// first: of its process with a higher seq, or of any other process, which
// retires it.
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
		{"a report of a later process of its node", []op{{in: input{kind: opReport, node: 0, nodeEpoch: testNodeEpoch + 1, seq: 1}, out: output{status: stOK}, call: 10, ret: 20}, stale(opReport, 5, 95)}, false},
		{"a report of an earlier process of its node", []op{{in: input{kind: opReport, node: 0, nodeEpoch: testNodeEpoch - 1, seq: 1}, out: output{status: stOK}, call: 10, ret: 20}, stale(opReport, 5, 95)}, false},
		{"an earlier report of its process", []op{{in: input{kind: opReport, node: 0, nodeEpoch: testNodeEpoch, seq: 4}, out: output{status: stOK}, call: 10, ret: 20}, stale(opReport, 5, 95)}, true},
		{"a report of another process of its node, sent after the answer", []op{stale(opReport, 5, 50), {in: input{kind: opReport, node: 0, nodeEpoch: testNodeEpoch + 1, seq: 1}, out: output{status: stOK}, call: 70, ret: 80}}, true},
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

// numbering draws seqs per node, strictly increasing across clients; a
// restart gives the node a new node_epoch, one above, and seqs from 1; the
// process before it goes on with its own seqs when a zombie report is
// drawn (none before the first restart), until the current one has sent
// zombieWindow reports.
func TestUnitNumberingPerNode(t *testing.T) {
	nb := newNumbering(testNodeEpoch)
	next := func(n int, zombie bool) [2]uint64 {
		e, s := nb.next(n, zombie)
		return [2]uint64{e, s}
	}
	assert.Equal(t, [2]uint64{testNodeEpoch, 1}, next(0, false))
	assert.Equal(t, [2]uint64{testNodeEpoch, 2}, next(0, true), "no process before the first: the current one's")
	assert.Equal(t, [2]uint64{testNodeEpoch, 1}, next(1, false), "each node its own seqs")
	nb.restart(0)
	assert.Equal(t, uint64(testNodeEpoch+1), nb.current(0))
	assert.Equal(t, [2]uint64{testNodeEpoch + 1, 1}, next(0, false))
	assert.Equal(t, [2]uint64{testNodeEpoch, 3}, next(0, true), "the old process goes on")
	assert.Equal(t, [2]uint64{testNodeEpoch + 1, 2}, next(0, false))
	nb.restart(0)
	assert.Equal(t, [2]uint64{testNodeEpoch + 1, 3}, next(0, true), "the process before the current one")
	assert.Equal(t, [2]uint64{testNodeEpoch, 2}, next(1, false), "another node's process goes on")
	for range zombieWindow {
		next(0, false)
	}
	assert.Equal(t, [2]uint64{testNodeEpoch + 2, zombieWindow + 1}, next(0, true), "the old process has stopped")

	nb.replaced(0, testNodeEpoch+1)
	assert.Equal(t, uint64(testNodeEpoch+2), nb.current(0), "told that an old process was replaced: nothing to do")
	nb.replaced(0, testNodeEpoch+2)
	assert.Equal(t, [2]uint64{testNodeEpoch + 3, 1}, next(0, false), "told that the current one was: it restarts")
}

// A 409 is its own outcome, and says whether the node moved away from the
// report's process.
func TestUnitStaleAnswer(t *testing.T) {
	reply := func(reason string) *nats.Msg {
		m := nats.NewMsg("inbox")
		m.Header.Set(protocol.HeaderErrorCode, "409")
		m.Header.Set(protocol.HeaderError, reason)
		return m
	}
	out := result(input{kind: opReport}, reply("stale report of node 1: node_epoch 5 seq 2, the state holds node_epoch 5 seq 3"), nil)
	assert.Equal(t, output{status: stStale, code: "409"}, out)
	out = result(input{kind: opReport}, reply("stale report of node 1: node_epoch 5 seq 2 is a process the node moved away from (the state holds node_epoch 6 seq 1)"), nil)
	assert.Equal(t, output{status: stStale, code: "409", retired: true}, out)
}
