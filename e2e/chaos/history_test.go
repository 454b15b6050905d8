package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	flowclient "github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// The clients report for a bounded set of nodes and flows, so that the
// model's state stays small.
const (
	nNodes   = 6 // node ids 1..nNodes
	nFlows   = 4 // flow ids 1..nFlows
	maxValue = 999
)

// report is one node's report, or an aggregate: per flow, state_size,
// last_exec_time and start_time, 0 when absent (the clients send 1 to
// maxValue).
type report [nFlows][3]uint16

type opKind uint8

const (
	opGet     opKind = iota
	opReport         // a valid report
	opInvalid        // a report the worker must reject
)

type input struct {
	kind   opKind
	node   int // index: node id node+1
	report report
	// nodeEpoch and seq number a report (PROTOCOL.md, "Stale reports"); 0:
	// unnumbered (a ballast node's report, the nemesis's own writes, and
	// those of the tests that send reports by hand)
	nodeEpoch, seq uint64
	why            string // opInvalid: what is wrong with it
	call           int64  // the operation's invocation and completion, for the model's clock
	ret            int64
}

// numbering numbers the reports of a run's flownodes: per node, the
// node_epoch of its process and a seq that every client reporting for the
// node draws from one counter. Two clients' reports of a node may arrive in
// another order than their seqs, and the lower one is then answered 409:
// that is the protocol, not a failure. Now and then a node's process
// restarts (restart): a new node_epoch, one above the last, and seq from 1
// again; its old process's reports still in flight are then stale once one
// of the new process is applied after one of the old. And now and then,
// while the new process has sent fewer than zombieWindow reports, the old
// one, which does not know it was replaced yet (a flownode paused, then
// resumed, while its successor started), sends one of its own (zombie):
// stale as well, once the node moved away from it.
type numbering struct {
	base uint64 // the first node_epoch of every node
	mu   sync.Mutex
	node [nNodes]struct{ now, old process }
}

// process is one process of a node: its node_epoch and last seq; an epoch
// of 0 is none.
type process struct{ epoch, seq uint64 }

func newNumbering(base uint64) *numbering {
	nb := &numbering{base: base}
	for n := range nb.node {
		nb.node[n].now.epoch = base
	}
	return nb
}

// next numbers a report of node index n by its current process, or by
// the process before it if zombie and there is one that may still send.
func (nb *numbering) next(n int, zombie bool) (epoch, seq uint64) {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	p := &nb.node[n].now
	if zombie && nb.node[n].old.epoch != 0 && p.seq < zombieWindow {
		p = &nb.node[n].old
	}
	p.seq++
	return p.epoch, p.seq
}

// current returns node index n's node_epoch.
func (nb *numbering) current(n int) uint64 {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	return nb.node[n].now.epoch
}

// replaced restarts node index n's process if it is nodeEpoch's, which a
// worker answered the node moved away from: as a flownode told so would,
// rather than send stale reports until its next restart. (A memory worker
// restarted forgets every node's processes, and an old process's report
// that reaches it first then retires the current one.)
func (nb *numbering) replaced(n int, nodeEpoch uint64) {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	if nb.node[n].now.epoch == nodeEpoch {
		nb.restartLocked(n)
	}
}

// restart starts a new process of node index n; the current one becomes
// the old one.
func (nb *numbering) restart(n int) {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	nb.restartLocked(n)
}

func (nb *numbering) restartLocked(n int) {
	nd := &nb.node[n]
	nd.old, nd.now = nd.now, process{epoch: nd.now.epoch + 1}
}

// restartOdds: one report in restartOdds first restarts its node's process
// (every few seconds per node at the clients' pace, so that a node has
// far fewer than flowstate.MaxRetiredEpochs processes within lag);
// zombieOdds: one report in zombieOdds is its node's old process's, while
// the current one has sent fewer than zombieWindow.
const (
	restartOdds  = 500
	zombieOdds   = 10
	zombieWindow = 30
)

// A numbered report that names a flow of the model also names its node's
// marker flow, markerFlow+node, with its seq as state_size and its
// node_epoch as last_exec_time: only that node reports the flow, so a get
// shows which of the node's reports the state holds (mark). A report that
// names no flow of the model leaves every flow, its marker too.
const markerFlow = 501

// mark is the numbering of a node's report that a get shows: zero if the
// get shows no marker for the node.
type mark struct{ epoch, seq uint64 }

type status uint8

const (
	stOK       status = iota // acked, or a get answered
	stRejected               // 4xx but 409, or no responders: nothing happened
	stUnknown                // timeout, 5xx, connection lost: may or may not have happened
	stStale                  // 409: a later report of the node's process is held; nothing happened
)

type output struct {
	status status
	code   string // service error code, or the client's error
	// conflict: a report answered 503 because the bucket refused its
	// node-key write's condition (state.ErrConflict)
	conflict bool
	// retired: a report answered 409 because its node moved away from its
	// process
	retired bool
	epoch   string
	rev     uint64
	agg     report       // a get's aggregate
	marks   [nNodes]mark // a get's marker flows
	alien   bool         // the aggregate holds flows or values no client sent
}

// op is one recorded operation; times are ns since the history's origin.
type op struct {
	client    int
	in        input
	out       output
	call, ret int64
}

// history is every operation of a run, in completion order.
type history struct {
	origin time.Time
	mu     sync.Mutex
	ops    []op
}

func newHistory() *history { return &history{origin: time.Now()} }

// now is the history's clock (monotonic).
func (h *history) now() int64 { return int64(time.Since(h.origin)) }

func (h *history) add(o op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

func (h *history) snapshot() []op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]op(nil), h.ops...)
}

var subjects = protocol.SubjectsOf(protocol.DefaultPrefix)

// client sends operations on its own connection until ctx ends.
type client struct {
	id      int
	nc      *nats.Conn
	rng     *rand.Rand
	h       *history
	timeout time.Duration      // of a request
	pause   time.Duration      // at most, between two operations
	chunked *flowclient.Client // gets in chunks (a large state), if set
	numbers *numbering         // numbers the reports, if set
}

func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		o := c.do(c.next())
		c.h.add(o)
		if o.out.retired {
			c.numbers.replaced(o.in.node, o.in.nodeEpoch)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(c.rng.Int64N(int64(c.pause) + 1))):
		}
	}
}

// next draws an operation: gets and reports about evenly, some reports
// empty, some that the worker must reject; reports are numbered (if the
// client numbers them), and now and then the node's process restarts
// first, or the report is its old process's (numbering).
func (c *client) next() input {
	in := c.draw()
	c.number(&in)
	return in
}

// draw draws an operation for next, not numbered.
func (c *client) draw() input {
	in := input{kind: opReport, node: c.rng.IntN(nNodes)}
	switch p := c.rng.IntN(100); {
	case p < 45:
		return input{kind: opGet}
	case p < 50:
		// empty: the node leaves every flow
	case p < 55:
		in.kind, in.why = opInvalid, "subject and body name different nodes"
	case p < 58:
		in.kind, in.why = opInvalid, "a float value"
	default:
		for f := range nFlows {
			if c.rng.IntN(2) == 0 {
				continue
			}
			for k := range 3 {
				if c.rng.IntN(3) > 0 {
					in.report[f][k] = uint16(1 + c.rng.IntN(maxValue))
				}
			}
		}
	}
	return in
}

// number numbers in, a report, if the client numbers reports, first
// restarting its node's process now and then.
func (c *client) number(in *input) {
	if c.numbers == nil || in.kind == opGet {
		return
	}
	if c.rng.IntN(restartOdds) == 0 {
		c.numbers.restart(in.node)
	}
	switch in.kind {
	case opReport:
		in.nodeEpoch, in.seq = c.numbers.next(in.node, c.rng.IntN(zombieOdds) == 0)
	case opInvalid:
		// The oldest seq of the node's process: a worker that asked
		// whether it is stale before decoding it would answer 409 rather
		// than 400.
		in.nodeEpoch, in.seq = c.numbers.current(in.node), 1
	}
}

// do sends one operation and records its result.
func (c *client) do(in input) op {
	subject, body := subjects.Get, []byte(nil)
	switch in.kind {
	case opReport:
		subject, body = subjects.Heartbeat(uint64(in.node+1)), encodeReport(in.node, in.report, in.nodeEpoch, in.seq)
	case opInvalid:
		subject, body = subjects.Heartbeat(uint64(in.node+1)), invalidBody(in)
	}
	o := op{client: c.id, in: in}
	o.call = c.h.now()
	o.in.call = o.call
	if in.kind == opGet && c.chunked != nil {
		o.out = chunkedGet(c.chunked)
		o.ret = c.h.now()
		return o
	}
	msg, err := c.nc.Request(subject, body, c.timeout)
	o.ret = c.h.now()
	o.out = result(in, msg, err)
	return o
}

// encodeReport encodes node index node's report r, numbered with
// nodeEpoch and seq unless seq is 0, and then with its marker flow if r
// names a flow.
func encodeReport(node int, r report, nodeEpoch, seq uint64) []byte {
	rep := codec.Report{NodeID: uint64(node + 1)}
	if seq != 0 {
		rep.NodeEpoch, rep.HasNodeEpoch = nodeEpoch, true
		rep.Health.Seq, rep.Health.HasSeq = seq, true
	}
	for f := range nFlows {
		fl := flowstate.Flow{ID: flowstate.FlowID(f + 1)}
		if v := r[f][0]; v != 0 {
			fl.Has, fl.StateSize = fl.Has|flowstate.HasStateSize, uint64(v)
		}
		if v := r[f][1]; v != 0 {
			fl.Has, fl.LastExecTime = fl.Has|flowstate.HasLastExecTime, int64(v)
		}
		if v := r[f][2]; v != 0 {
			fl.Has, fl.StartTime = fl.Has|flowstate.HasStartTime, int64(v)
		}
		if fl.Has != 0 {
			rep.Flows = append(rep.Flows, fl)
		}
	}
	if seq != 0 && len(rep.Flows) > 0 {
		rep.Flows = append(rep.Flows, flowstate.Flow{ID: flowstate.FlowID(markerFlow + node),
			Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: seq, LastExecTime: int64(nodeEpoch)})
	}
	return codec.AppendReport(nil, &rep)
}

func invalidBody(in input) []byte {
	if in.why == "a float value" {
		m := map[string]any{"node_id": uint64(in.node + 1), "state_size": map[uint32]float64{1: 1.5}}
		if in.seq != 0 {
			m["node_epoch"], m["seq"] = in.nodeEpoch, in.seq
		}
		b, _ := msgpack.Marshal(m)
		return b
	}
	// The body names another node than the subject.
	return encodeReport((in.node+1)%nNodes, report{{7, 7, 7}}, in.nodeEpoch, in.seq)
}

// result turns a reply into an output.
func result(in input, msg *nats.Msg, err error) output {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return output{status: stRejected, code: "no responders"}
	case err != nil:
		return output{status: stUnknown, code: err.Error()}
	}
	if code := msg.Header.Get(protocol.HeaderErrorCode); code != "" {
		if code == strconv.Itoa(protocol.CodeStale) {
			return output{status: stStale, code: code, retired: strings.Contains(msg.Header.Get(protocol.HeaderError), retiredReason)}
		}
		if code[0] == '4' {
			return output{status: stRejected, code: code}
		}
		return output{status: stUnknown, code: code, conflict: strings.Contains(msg.Header.Get(protocol.HeaderError), conflictReason)}
	}
	out := output{status: stOK, epoch: msg.Header.Get(protocol.HeaderEpoch)}
	rev, perr := strconv.ParseUint(msg.Header.Get(protocol.HeaderRevision), 10, 64)
	if perr != nil || out.epoch == "" {
		return output{status: stOK, alien: true, code: fmt.Sprintf("bad version headers %v", msg.Header)}
	}
	out.rev = rev
	if in.kind == opGet {
		out.agg, out.marks, out.alien = decodeAggregate(msg.Data)
	}
	return out
}

// conflictReason is in the reason of a report answered 503 because its
// node-key write's condition was refused (state.ErrConflict).
const conflictReason = "the node's key was written meanwhile"

// retiredReason is in the reason of a report answered 409 because its
// node_epoch is one its node moved away from (state.StaleError).
const retiredReason = "is a process the node moved away from"

// decodeAggregate returns the aggregate, its marker flows, and whether it
// holds anything that no client sent (or does not decode).
func decodeAggregate(data []byte) (report, [nNodes]mark, bool) {
	v, err := codec.DecodeAggregate(data)
	if err != nil {
		return report{}, [nNodes]mark{}, true
	}
	return fromValue(v)
}

// fromValue returns the model's flows of v, its marker flows, and whether
// v holds anything that no client sent (ballast flows are left to
// ballastIntact).
func fromValue(v flowstate.FlowStateValue) (report, [nNodes]mark, bool) {
	var r report
	var marks [nNodes]mark
	alien := false
	put := func(id flowstate.FlowID, k int, x int64) {
		if isBallast(id) {
			return
		}
		if n := int(id) - markerFlow; n >= 0 && n < nNodes && k < 2 {
			if x < 1 {
				alien = true
			} else if k == 0 {
				marks[n].seq = uint64(x)
			} else {
				marks[n].epoch = uint64(x)
			}
			return
		}
		if id < 1 || id > nFlows || x < 1 || x > maxValue {
			alien = true
			return
		}
		r[id-1][k] = uint16(x)
	}
	for id, x := range v.StateSize {
		if n := int(id) - markerFlow; n >= 0 && n < nNodes {
			x = min(x, math.MaxInt64) // a seq
		} else {
			x = min(x, maxValue+1)
		}
		put(id, 0, int64(x))
	}
	for id, x := range v.LastExecTimeMap {
		put(id, 1, x)
	}
	for id, x := range v.StartTimeMap {
		put(id, 2, x)
	}
	for n, m := range marks {
		if (m.seq == 0) != (m.epoch == 0) {
			alien = true // half a marker
			marks[n] = mark{}
		}
	}
	return r, marks, alien
}
