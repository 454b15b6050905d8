package client

import (
	"context"
	"fmt"
	"mime"

	"github.com/nats-io/nats.go"

	"flowstate/codec"
	"flowstate/flowstate"
	"flowstate/protocol"
)

// State is the aggregate at one version.
type State struct {
	// Version is the state's epoch and revision. Revision 0 means that no
	// report has been merged in the epoch; Value is then empty.
	flowstate.Version
	// Value is the aggregate; its maps are never nil.
	Value flowstate.FlowStateValue
	// EpochChanged is set by Watch on the first state of a new epoch: the
	// state started over (the worker restarted with an empty store, or the
	// store was cleared), so revisions start over too and flows the caller
	// knew may be gone. It is false on the first state Watch yields.
	EpochChanged bool
}

// Get returns the worker's current aggregate. A worker that cannot serve it
// returns a *ServiceError (413: the aggregate is larger than the
// connection's max payload; 503: not ready); without a worker the error
// wraps ErrNoWorker.
func (c *Client) Get(ctx context.Context) (State, error) {
	reply, err := c.request(ctx, &nats.Msg{Subject: c.getSubject})
	if err != nil {
		return State{}, err
	}
	return decodeState(reply)
}

// GetJSON returns the worker's current aggregate as the exact bytes that
// GreptimeDB's serde_json writes for FlowStateValue, with its version. Its
// errors are Get's.
func (c *Client) GetJSON(ctx context.Context) ([]byte, flowstate.Version, error) {
	msg := nats.NewMsg(c.getSubject)
	msg.Header.Set(protocol.HeaderAccept, protocol.ContentTypeJSON)
	reply, err := c.request(ctx, msg)
	if err != nil {
		return nil, flowstate.Version{}, err
	}
	v, err := parseVersion(reply.Header)
	if err != nil {
		return nil, flowstate.Version{}, err
	}
	if ct := mediaType(reply.Header); ct != protocol.ContentTypeJSON {
		return nil, flowstate.Version{}, fmt.Errorf("%w: asked for %s, got Content-Type %q", ErrBadReply, protocol.ContentTypeJSON, ct)
	}
	return reply.Data, v, nil
}

// decodeState decodes an aggregate message, a get's reply or an update,
// by its Content-Type (msgpack when absent).
func decodeState(msg *nats.Msg) (State, error) {
	v, err := parseVersion(msg.Header)
	if err != nil {
		return State{}, err
	}
	var val flowstate.FlowStateValue
	if mediaType(msg.Header) == protocol.ContentTypeJSON {
		val, err = flowstate.DecodeValue(msg.Data)
	} else {
		val, err = codec.DecodeAggregate(msg.Data)
	}
	if err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	return State{Version: v, Value: val}, nil
}

// mediaType returns the media type of the Content-Type header, "" if none
// or unparsable.
func mediaType(h nats.Header) string {
	mt, _, err := mime.ParseMediaType(h.Get(protocol.HeaderContentType))
	if err != nil {
		return ""
	}
	return mt
}
