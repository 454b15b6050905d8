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
type Report struct {
	NodeID uint64
	// NodeEpoch is the flownode's start time, unix ms; informational only.
	// 0 leaves it out of the report.
	NodeEpoch uint64
	// Value is the node's flows: state size, last and first execution time
	// (unix ms) per flow. Nil maps are empty.
	Value flowstate.FlowStateValue
	// Health is the report's protocol v3 part: per flow the rows processed
	// and the last errors, and the report's seq within its process (with
	// NodeEpoch, a report not newer than one the state holds is refused as
	// stale: ErrStale). Its zero value leaves it out.
	Health flowstate.Health
}

// AppendMsgpack appends r's msgpack form, as PROTOCOL.md defines the
// heartbeat report, to dst.
func (r Report) AppendMsgpack(dst []byte) []byte {
	return codec.AppendReport(dst, &codec.Report{
		NodeID:       r.NodeID,
		NodeEpoch:    r.NodeEpoch,
		HasNodeEpoch: r.NodeEpoch != 0,
		Flows:        r.Value.Flows(),
		Health:       r.Health,
	})
}

// Publish sends r without asking for an acknowledgement. It returns once
// the connection has buffered the report: it says nothing of whether a
// worker received or applied it (use Send for that).
func (c *Client) Publish(r Report) error {
	if err := c.nc.Publish(c.HeartbeatSubject(r.NodeID), r.AppendMsgpack(nil)); err != nil {
		return fmt.Errorf("client: publish report of node %d: %w", r.NodeID, err)
	}
	return nil
}

// Send sends r as a request and returns once the worker has applied it,
// with the version of the state that includes it: a Get that follows sees
// the report. A report the worker rejects returns a *ServiceError whose
// Code is 400 and whose Reason says why; it changed nothing. Without a
// worker, the error wraps ErrNoWorker; on timeout, context.DeadlineExceeded
// (the report may then still be applied).
func (c *Client) Send(ctx context.Context, r Report) (flowstate.Version, error) {
	return c.sendBody(ctx, r.NodeID, r.AppendMsgpack(nil))
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
