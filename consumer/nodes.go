package consumer

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// NodeView is one entry of the per-node view on <prefix>.state.nodes,
// encoded in msgpack by codec.AppendNodes and in JSON by encoding/json.
type NodeView = codec.NodeView

// nodesEncoding is the node view of one version, encoded on demand. Every
// report makes a new revision, and a node_epoch change bumps epochsGen, so
// (version, gen) names one view.
type nodesEncoding struct {
	valid   bool
	version flowstate.Version
	gen     uint64
	msgpack []byte // nil until encoded
	json    []byte // nil until encoded
}

// minNodeJSON is the smallest JSON encoding of one NodeView and its comma:
// the JSON view of n nodes takes at least n*minNodeJSON + len("[]"), which
// is checked before anything is copied or encoded (codec.MinNodesLen is
// msgpack's).
var minNodeJSON = func() int {
	zero := uint64(0)
	a, errA := json.Marshal(NodeView{})
	b, errB := json.Marshal(NodeView{NodeEpoch: &zero})
	if errA != nil || errB != nil {
		panic("consumer: encode an empty node view")
	}
	return min(len(a), len(b)) + len(",")
}()

// noteNodeEpoch remembers the node_epoch of a node's applied report.
func (w *Worker) noteNodeEpoch(node uint64, epoch uint64, has bool) {
	w.epochsMu.Lock()
	defer w.epochsMu.Unlock()
	old, had := w.epochs[node]
	switch {
	case has && (!had || old != epoch):
		w.epochs[node] = epoch
	case !has && had:
		delete(w.epochs, node)
	default:
		return
	}
	w.epochsGen++
}

// handleNodes answers the per-node view: msgpack, or JSON when the request
// accepts application/json.
func (w *Worker) handleNodes(req micro.Request) {
	if err := w.serveNodes(req, wantsJSON(req.Headers().Get(protocol.HeaderAccept))); err != nil {
		w.failRequest(endpointNodes, req, err)
	}
}

// serveNodes answers one nodes request from the encoding of the current
// version, made at most once per version and format. A view that cannot fit
// the connection's max payload is refused (413) from the node count alone,
// before the state is copied or anything encoded.
func (w *Worker) serveNodes(req micro.Request, asJSON bool) error {
	maxPayload := w.nc.MaxPayload()
	if n, _ := w.mgr.Size(); int64(minNodesSize(n, asJSON)) > maxPayload {
		return viewTooLarge(minNodesSize(n, asJSON), true, maxPayload)
	}
	v, err := w.mgr.Version(w.ctx)
	if err != nil {
		return err
	}
	w.nodesMu.Lock()
	defer w.nodesMu.Unlock()
	c := &w.nodesCache
	gen := w.epochGen()
	if !c.valid || c.version != v || c.gen != gen {
		nodes, nv, err := w.mgr.Nodes(w.ctx) // a copy, taken under the state's lock
		if err != nil {
			return err
		}
		*c = nodesEncoding{valid: true, version: nv, gen: gen}
		if int64(minNodesSize(len(nodes), asJSON)) > maxPayload {
			return viewTooLarge(minNodesSize(len(nodes), asJSON), true, maxPayload)
		}
		if err := w.encodeNodes(c, nodes, asJSON); err != nil {
			return err
		}
	} else if body := c.body(asJSON); body == nil {
		nodes, _, err := w.mgr.Nodes(w.ctx)
		if err != nil {
			return err
		}
		if err := w.encodeNodes(c, nodes, asJSON); err != nil {
			return err
		}
	}
	h := versionHeader(c.version)
	if asJSON {
		h.Set(protocol.HeaderContentType, protocol.ContentTypeJSON)
	} else {
		h.Set(protocol.HeaderContentType, protocol.ContentTypeMsgpack)
	}
	body := c.body(asJSON)
	if n := len(body) + headerSize(h); int64(n) > maxPayload {
		return viewTooLarge(n, false, maxPayload)
	}
	if err := req.Respond(body, micro.WithHeaders(micro.Headers(h))); err != nil {
		return fmt.Errorf("consumer: nodes reply: %w", err)
	}
	return nil
}

func (c *nodesEncoding) body(asJSON bool) []byte {
	if asJSON {
		return c.json
	}
	return c.msgpack
}

// encodeNodes encodes nodes, with the node_epoch the state holds for each,
// into c.
func (w *Worker) encodeNodes(c *nodesEncoding, nodes []state.NodeInfo, asJSON bool) error {
	view := make([]NodeView, len(nodes))
	for i, n := range nodes {
		view[i] = NodeView{NodeID: n.ID, LastReport: n.LastReport.UnixMilli(), Flows: n.Flows}
		if n.HasNodeEpoch {
			// The state's, not what this worker saw: every worker shows
			// the same at one revision.
			e := n.NodeEpoch
			view[i].NodeEpoch = &e
		}
	}
	if !asJSON {
		c.msgpack = codec.AppendNodes(make([]byte, 0, codec.MinNodesLen(len(view))), view)
		return nil
	}
	var err error
	if c.json, err = json.Marshal(view); err != nil {
		return fmt.Errorf("consumer: encode the node view: %w", err)
	}
	return nil
}

func (w *Worker) epochGen() uint64 {
	w.epochsMu.Lock()
	defer w.epochsMu.Unlock()
	return w.epochsGen
}

// minNodesSize is the fewest bytes a view of n nodes encodes to.
func minNodesSize(n int, asJSON bool) int {
	if asJSON {
		return n*minNodeJSON + len("[]")
	}
	return codec.MinNodesLen(n)
}

// viewTooLarge is the error of a node view over the max payload; atLeast
// says that size is a lower bound (the view was not encoded).
func viewTooLarge(size int, atLeast bool, maxPayload int64) error {
	bound := ""
	if atLeast {
		bound = "at least "
	}
	return fmt.Errorf("consumer: node view of %s%d bytes exceeds the connection's max payload of %d bytes: %w",
		bound, size, maxPayload, nats.ErrMaxPayload)
}
