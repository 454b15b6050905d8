package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"mime"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
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
	// Changed is set by Watch: the flows whose entry differs from the state
	// it yielded before (every flow of the first one), sorted by ID, each
	// with its entry now; a flow with Has == 0 left the aggregate. A delta
	// update may list a flow whose entry it set to the same value.
	Changed []flowstate.Flow
}

// Clone returns a copy of s that shares no memory with it. Watch reuses a
// state's Value and Changed once the loop body returns; keep a Clone of
// what you need after that.
func (s State) Clone() State {
	s.Value = flowstate.FlowStateValue{
		StateSize:       maps.Clone(s.Value.StateSize),
		LastExecTimeMap: maps.Clone(s.Value.LastExecTimeMap),
		StartTimeMap:    maps.Clone(s.Value.StartTimeMap),
	}
	s.Changed = slices.Clone(s.Changed)
	return s
}

// Get returns the worker's current aggregate, of any size: it asks for a
// chunked snapshot (PROTOCOL.md v2) and joins the chunks, all of one
// version, in order, within the client's timeout. A worker that predates v2
// answers with one message, which is taken as is. A worker that cannot
// serve the state returns a *ServiceError (503: not ready; 413 only from a
// v1 worker whose aggregate exceeds the max payload); without a worker the
// error wraps ErrNoWorker.
func (c *Client) Get(ctx context.Context) (State, error) {
	s, _, err := c.getChunked(ctx)
	return s, err
}

// GetJSON returns the worker's current aggregate as the exact bytes that
// GreptimeDB's serde_json writes for FlowStateValue, with its version, for
// a state of any size: it reads the chunked snapshot (Get) and renders its
// JSON (flowstate.AppendJSON). Its errors are Get's.
func (c *Client) GetJSON(ctx context.Context) ([]byte, flowstate.Version, error) {
	s, err := c.Get(ctx)
	if err != nil {
		return nil, flowstate.Version{}, err
	}
	return flowstate.AppendJSON(nil, s.Value.Flows()), s.Version, nil
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

// GetStats returns the worker's flow stats (protocol v3, the stats view:
// GreptimeDB's aggregate, and per flow the most rows any node processed and
// its newest errors over the nodes, each with its node) as values, with
// their version, for a view of any size: it asks for the view in chunks
// (Flow-State-View: stats with Flow-State-Chunks: 1) and joins them, all of
// one version, in order, within the client's timeout, as Get does for
// GreptimeDB's value. The view's AppendJSON (or MarshalJSON) is, byte for
// byte, what GetStatsJSON returns for the same revision. A worker that
// predates v3 ignores the view and answers GreptimeDB's value, which comes
// back with no Stats. A chunk that breaks the protocol returns an error
// wrapping ErrBadReply; the other errors are Get's.
func (c *Client) GetStats(ctx context.Context) (flowstate.StatsView, flowstate.Version, error) {
	var j chunkSeq
	var view flowstate.StatsView
	var version flowstate.Version
	flows := 0
	err := c.getChunks(ctx, protocol.ViewStats, func(msg *nats.Msg) (bool, error) {
		if j.n == 0 && msg.Header.Values(protocol.HeaderChunk) == nil {
			// One message without a chunk header: a worker that predates v2.
			v, err := parseVersion(msg.Header)
			if err != nil {
				return false, err
			}
			if view, err = codec.DecodeStats(msg.Data); err != nil {
				return false, fmt.Errorf("%w: %w", ErrBadReply, err)
			}
			version = v
			return true, c.checkFlows(countStatsFlows(view))
		}
		part, last, err := nextChunk(&j, msg, codec.DecodeStats, statsRange)
		if err != nil {
			return false, err
		}
		if flows += countStatsFlows(part); flows > c.maxFlows {
			return false, c.checkFlows(flows)
		}
		view.Flows = append(view.Flows, part.Flows...)
		view.Stats = append(view.Stats, part.Stats...)
		version = j.version
		return last, nil
	})
	if err != nil {
		return flowstate.StatsView{}, flowstate.Version{}, err
	}
	return view, version, nil
}

// countStatsFlows returns the number of distinct flows v names; its
// slices are sorted by ID.
func countStatsFlows(v flowstate.StatsView) int {
	n, i := len(v.Flows), 0
	for _, st := range v.Stats {
		for i < len(v.Flows) && v.Flows[i].ID < st.ID {
			i++
		}
		if i == len(v.Flows) || v.Flows[i].ID != st.ID {
			n++
		}
	}
	return n
}

// statsRange returns the lowest and highest flow id of v, (MaxInt64, -1)
// when empty. v's slices are sorted by ID.
func statsRange(v flowstate.StatsView) (lo, hi int64) {
	lo, hi = math.MaxInt64, -1
	if len(v.Flows) > 0 {
		lo, hi = int64(v.Flows[0].ID), int64(v.Flows[len(v.Flows)-1].ID)
	}
	if len(v.Stats) > 0 {
		lo, hi = min(lo, int64(v.Stats[0].ID)), max(hi, int64(v.Stats[len(v.Stats)-1].ID))
	}
	return lo, hi
}

// GetStatsJSON returns the worker's flow stats (protocol v3, the stats
// view: the aggregate, and per flow the processed rows and the newest
// errors over the nodes) as the JSON bytes PROTOCOL.md gives, with their
// version, as the worker writes them, in one message: a view past the
// connection's max payload returns a *ServiceError 413 (GetStats reads a
// view of any size, and its AppendJSON gives the same bytes). Bytes that
// are not one JSON object of the view's shape return an error wrapping
// ErrBadReply. Its other errors are Get's.
func (c *Client) GetStatsJSON(ctx context.Context) ([]byte, flowstate.Version, error) {
	reply, err := c.request(ctx, &nats.Msg{Subject: c.getSubject, Header: nats.Header{
		protocol.HeaderView: {protocol.ViewStats}, protocol.HeaderAccept: {protocol.ContentTypeJSON}}})
	if err != nil {
		return nil, flowstate.Version{}, err
	}
	v, err := parseVersion(reply.Header)
	if err != nil {
		return nil, flowstate.Version{}, err
	}
	if err := checkStatsJSON(reply.Data); err != nil {
		return nil, flowstate.Version{}, err
	}
	return reply.Data, v, nil
}

// statsJSON is the shape of the stats view's JSON (PROTOCOL.md v3).
type statsJSON struct {
	StateSize       map[flowstate.FlowID]uint64 `json:"state_size"`
	LastExecTimeMap map[flowstate.FlowID]int64  `json:"last_exec_time_map"`
	StartTimeMap    map[flowstate.FlowID]int64  `json:"start_time_map"`
	ProcessedRows   map[flowstate.FlowID]uint64 `json:"processed_rows"`
	LastErrors      map[flowstate.FlowID][]struct {
		Time    *int64  `json:"time"`
		NodeID  *uint64 `json:"node_id"`
		Message *string `json:"message"`
	} `json:"last_errors"`
}

// checkStatsJSON returns an error wrapping ErrBadReply unless data is one
// JSON object of the stats view's shape: its five maps keyed by flow id,
// at most flowstate.MaxFlowErrors errors a flow, each with its time, node
// and a message of 1 to flowstate.MaxErrorMessage bytes.
func checkStatsJSON(data []byte) error {
	var v statsJSON
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		return fmt.Errorf("%w: the stats view's JSON: %w", ErrBadReply, err)
	}
	if d.More() {
		return fmt.Errorf("%w: the stats view's JSON: more than one value", ErrBadReply)
	}
	if v.StateSize == nil || v.LastExecTimeMap == nil || v.StartTimeMap == nil || v.ProcessedRows == nil || v.LastErrors == nil {
		return fmt.Errorf("%w: the stats view's JSON lacks one of its five maps", ErrBadReply)
	}
	for id, errs := range v.LastErrors {
		if len(errs) > flowstate.MaxFlowErrors {
			return fmt.Errorf("%w: the stats view's JSON: flow %d has %d errors, more than %d", ErrBadReply, id, len(errs), flowstate.MaxFlowErrors)
		}
		for _, e := range errs {
			if e.Time == nil || e.NodeID == nil || e.Message == nil || len(*e.Message) == 0 || len(*e.Message) > flowstate.MaxErrorMessage {
				return fmt.Errorf("%w: the stats view's JSON: an error of flow %d lacks its time, node or message of 1 to %d bytes", ErrBadReply, id, flowstate.MaxErrorMessage)
			}
		}
	}
	return nil
}
