package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	flowclient "github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
)

// A large state (CHAOS_STATE=large): besides the nodes of the model,
// ballast nodes each report ballastFlows flows of their own, so that the
// aggregate holds 20,000 flows, past the 1 MB max payload as JSON (the
// aggregate key) and as one msgpack get. The clients then get the state in
// chunks (client.Get), and the ballast flows are checked apart from the
// model: each ballast node's flows are all in a get with the values it
// sends, or none of them (its key was purged with the bucket).
const (
	ballastNodes = 4
	ballastFlows = 5000
	ballastNode  = 101  // the first ballast node's id
	ballastFlow  = 1001 // the first ballast flow's id
	ballastEvery = 2 * time.Second
	largePause   = 250 * time.Millisecond // at most, between two operations of a client
)

// ballastReport is ballast node b's report, the same every time.
func ballastReport(b int) []byte {
	rep := codec.Report{NodeID: uint64(ballastNode + b)}
	for i := range ballastFlows {
		id := ballastFlow + b*ballastFlows + i
		rep.Flows = append(rep.Flows, flowstate.Flow{ID: flowstate.FlowID(id), Has: flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
			StateSize: ballastValue(id), LastExecTime: int64(ballastValue(id)) + 1, StartTime: int64(ballastValue(id)) + 2})
	}
	return codec.AppendReport(nil, &rep)
}

func ballastValue(id int) uint64 { return 1_000_000 + uint64(id) }

// isBallast reports whether flow id belongs to a ballast node.
func isBallast(id flowstate.FlowID) bool {
	return id >= ballastFlow && id < ballastFlow+ballastNodes*ballastFlows
}

// ballastIntact reports whether every ballast node's flows in v are all
// there with the values it sends, or none of them.
func ballastIntact(v flowstate.FlowStateValue) bool {
	var count [ballastNodes]int
	for id, x := range v.StateSize {
		if !isBallast(id) {
			continue
		}
		b := (int(id) - ballastFlow) / ballastFlows
		if x != ballastValue(int(id)) || v.LastExecTimeMap[id] != int64(x)+1 || v.StartTimeMap[id] != int64(x)+2 {
			return false
		}
		count[b]++
	}
	for _, n := range count {
		if n != 0 && n != ballastFlows {
			return false
		}
	}
	return true
}

// sendBallast sends ballast node b's report every ballastEvery until ctx
// ends, each recorded as a report the model knows only by its revision
// (node index nNodes+b).
func sendBallast(ctx context.Context, nc *nats.Conn, h *history, id, b int) {
	body := ballastReport(b)
	for ctx.Err() == nil {
		o := op{client: id, in: input{kind: opReport, node: nNodes + b}}
		o.call = h.now()
		msg, err := nc.Request(subjects.Heartbeat(uint64(ballastNode+b)), body, requestTimeout)
		o.ret = h.now()
		o.in.call, o.in.ret = o.call, o.ret
		o.out = result(o.in, msg, err)
		h.add(o)
		select {
		case <-ctx.Done():
		case <-time.After(ballastEvery):
		}
	}
}

// chunkedGet gets the state with client.Get (in chunks) and records it as
// result does a get.
func chunkedGet(c *flowclient.Client) output {
	s, err := c.Get(context.Background())
	var se *flowclient.ServiceError
	switch {
	case errors.Is(err, flowclient.ErrNoWorker):
		return output{status: stRejected, code: "no responders"}
	case errors.As(err, &se) && se.Code >= 400 && se.Code < 500:
		return output{status: stRejected, code: strconv.Itoa(se.Code)}
	case errors.As(err, &se):
		return output{status: stUnknown, code: strconv.Itoa(se.Code)}
	case err != nil:
		return output{status: stUnknown, code: err.Error()}
	}
	out := output{status: stOK, epoch: s.Epoch, rev: s.Revision}
	out.agg, out.marks, out.alien = fromValue(s.Value)
	if !ballastIntact(s.Value) {
		out.alien, out.code = true, fmt.Sprintf("ballast flows partly there or changed (%d flows)", len(s.Value.StateSize))
	}
	return out
}
