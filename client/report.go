package client

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
)

// Report is a flownode's heartbeat report. It replaces the node's previous
// report whole: an empty Value removes all of the node's flows.
//
// Unless the Client has Options.Unnumbered, Send and Publish number the
// report (protocol v3): a NodeEpoch of 0 becomes the Client's
// (Client.NodeEpoch, its creation time, so a restarted process has another),
// and a Health without a seq gets the Client's next one, strictly greater
// than every seq it gave before, whatever the node. The worker then refuses
// as stale (ErrStale; a published report is dropped) a report not newer
// than the one it holds for the node from the same Client, and one of a
// Client the node's reports have moved away from: so a report delayed in
// the network never replaces a later one. Use one Client for all the
// reports of a node, and send its reports one after the other: of two sent
// at once for one node, the one that arrives second may be the older and
// be refused. A Send that timed out can be sent again as is: the retry
// gets a new seq. A NodeEpoch or seq the caller sets is kept as given, and
// a seq set in the Client's epoch raises the Client's count to it, so that
// the reports it numbers next stay above it.
type Report struct {
	NodeID uint64
	// NodeEpoch names the flownode's process: its start time, unix ms. 0
	// means the Client's epoch (Client.NodeEpoch) in a numbered report, and
	// leaves node_epoch out with Options.Unnumbered.
	NodeEpoch uint64
	// Value is the node's flows: state size, last and first execution time
	// (unix ms) per flow. Nil maps are empty.
	Value flowstate.FlowStateValue
	// Health is the report's protocol v3 part: per flow the rows processed
	// and the last errors, and the report's seq within its process (with
	// NodeEpoch, a report not newer than one the state holds is refused as
	// stale: ErrStale). Its zero value leaves the health out, and has the
	// Client number the report unless Options.Unnumbered; a seq set here
	// (HasSeq) is sent as given.
	Health flowstate.Health
}

// AppendMsgpack appends r's msgpack form, as PROTOCOL.md defines the
// heartbeat report, to dst, as r is: the numbering of a Client's Send and
// Publish is theirs.
func (r Report) AppendMsgpack(dst []byte) []byte {
	return codec.AppendReport(dst, &codec.Report{
		NodeID:       r.NodeID,
		NodeEpoch:    r.NodeEpoch,
		HasNodeEpoch: r.NodeEpoch != 0,
		Flows:        r.Value.Flows(),
		Health:       r.Health,
	})
}

// Publish sends r, numbered (see Report), its error lists repaired
// (RepairErrors), without asking for an
// acknowledgement. It returns once the connection has buffered the report:
// it says nothing of whether a worker received or applied it (use Send for
// that).
func (c *Client) Publish(r Report) error {
	if err := c.nc.Publish(c.HeartbeatSubject(r.NodeID), c.number(c.repairErrors(r)).AppendMsgpack(nil)); err != nil {
		return fmt.Errorf("client: publish report of node %d: %w", r.NodeID, err)
	}
	return nil
}

// Send sends r, numbered (see Report), its error lists repaired
// (RepairErrors: a message not UTF-8, empty or too long, or more than 3
// errors for a flow, would have the worker refuse the whole report), as a
// request and returns once the
// worker has applied it, with the version of the state that includes it: a
// Get that follows sees the report. A report the worker rejects returns a
// *ServiceError whose Code is 400 and whose Reason says why; one it refuses
// as stale, a *ServiceError with Code 409 that matches ErrStale, its Reason
// naming both reports' node_epoch and seq; a report past a capacity limit,
// Code 507. Each changed nothing. Without a worker, the error wraps
// ErrNoWorker; on timeout, context.DeadlineExceeded (the report may then
// still be applied; sending it again numbers it anew).
func (c *Client) Send(ctx context.Context, r Report) (flowstate.Version, error) {
	return c.sendBody(ctx, r.NodeID, c.number(c.repairErrors(r)).AppendMsgpack(nil))
}

// number returns r as the Client sends it: unless unnumbered, with the
// Client's node_epoch if r has none and the Client's next seq if r has
// none.
func (c *Client) number(r Report) Report {
	if c.epoch == 0 {
		return r
	}
	if r.NodeEpoch == 0 {
		r.NodeEpoch = c.epoch
	}
	if !r.Health.HasSeq {
		r.Health.Seq, r.Health.HasSeq = c.seq.Add(1), true
		return r
	}
	if r.NodeEpoch == c.epoch {
		for cur := c.seq.Load(); cur < r.Health.Seq && !c.seq.CompareAndSwap(cur, r.Health.Seq); cur = c.seq.Load() {
		}
	}
	return r
}

// sendBody sends an encoded report of node nodeID as a request and parses
// the acknowledgement. body may be reused once it returns.
func (c *Client) sendBody(ctx context.Context, nodeID uint64, body []byte) (flowstate.Version, error) {
	reply, err := c.request(ctx, &nats.Msg{Subject: c.HeartbeatSubject(nodeID), Data: body})
	if err != nil {
		return flowstate.Version{}, err
	}
	v, err := parseVersion(reply.Header)
	if err != nil {
		return flowstate.Version{}, fmt.Errorf("client: acknowledgement of node %d: %w", nodeID, err)
	}
	return v, nil
}
