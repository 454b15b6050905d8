package consumer

import (
	"context"
	"errors"
	"fmt"
	"mime"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/protocol"
)

// handleGet answers a get with the aggregate, msgpack unless the request
// accepts application/json; in chunks (chunks.go) when it asks for them.
// Every failure goes through the one error path (failRequest).
func (w *Worker) handleGet(req micro.Request) {
	if err := w.serveGet(req); err != nil {
		w.failRequest(endpointGet, req, err)
		return
	}
	w.stats.gets.Add(1)
}

func (w *Worker) serveGet(req micro.Request) error {
	v, err := view(req)
	if err != nil {
		return err
	}
	asJSON := wantsJSON(req.Headers().Get(protocol.HeaderAccept))
	chunked := req.Headers().Get(protocol.HeaderChunks) == "1"
	if asJSON && chunked {
		return &badReport{kind: "bad_request", field: protocol.HeaderAccept,
			reason: "Accept: application/json cannot be chunked (Flow-State-Chunks: 1)"}
	}
	ctx := w.ctx
	if err := w.in.sync(ctx); err != nil {
		// A shared store's read barrier failed: this worker cannot tell
		// that its state holds every acked report, so it answers 503
		// rather than a state older than an ack (the client asks again).
		if !errors.Is(err, kv.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", kv.ErrUnavailable, err)
		}
		return fmt.Errorf("read barrier: %w", err)
	}
	if v == protocol.ViewStats {
		return w.serveStats(req, asJSON, chunked)
	}
	if chunked {
		return w.serveChunkedGet(ctx, req)
	}
	var size int
	err = w.withEncoded(ctx, asJSON, func(body []byte, v flowstate.Version) error {
		h := versionHeader(v)
		if asJSON {
			h.Set(protocol.HeaderContentType, protocol.ContentTypeJSON)
		} else {
			h.Set(protocol.HeaderContentType, protocol.ContentTypeMsgpack)
		}
		size = len(body) + headerSize(h)
		if int64(size) > w.nc.MaxPayload() {
			return &tooLargeError{size: len(body), max: w.nc.MaxPayload()}
		}
		// Respond copies body into the connection's buffer, so the cache
		// may reuse it once this returns.
		return req.Respond(body, micro.WithHeaders(micro.Headers(h)))
	})
	return err
}

// wantsJSON reports whether an Accept header asks for JSON.
func wantsJSON(accept string) bool {
	if accept == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(accept)
	return err == nil && mt == protocol.ContentTypeJSON
}

// errTooLarge is wrapped by the error of withEncoded when the msgpack
// aggregate cannot fit the connection's max payload: it is not even encoded.
var errTooLarge = errors.New("consumer: aggregate exceeds the max payload")

// tooLargeError says how large the aggregate that was not encoded is.
type tooLargeError struct {
	size int   // of the body
	max  int64 // the connection's max payload
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("aggregate of %d bytes exceeds the connection's max payload of %d bytes", e.size, e.max)
}

func (e *tooLargeError) Unwrap() error { return errTooLarge }

// withEncoded calls fn with the current aggregate in the asked encoding and
// its version. Each version is snapshotted and encoded at most once per
// format, into buffers reused across versions; fn runs under the cache's
// lock and must not keep body. A msgpack aggregate larger than the max
// payload is not encoded: withEncoded returns errTooLarge.
func (w *Worker) withEncoded(ctx context.Context, asJSON bool, fn func(body []byte, v flowstate.Version) error) error {
	v, err := w.mgr.Version(ctx)
	if err != nil {
		return err
	}
	w.cacheMu.Lock()
	defer w.cacheMu.Unlock()
	c := &w.cache
	if err := w.refreshLocked(ctx, v); err != nil {
		return err
	}
	if asJSON {
		if !c.hasJSON {
			c.json = flowstate.AppendJSON(c.json[:0], c.flows)
			c.hasJSON = true
		}
		return fn(c.json, c.version)
	}
	if !c.hasMsgpack {
		if n := codec.AggregateLen(c.flows); int64(n) > w.nc.MaxPayload() {
			w.stats.aggregateBytes.Store(int64(n)) // the size now, even though it does not fit
			return &tooLargeError{size: n, max: w.nc.MaxPayload()}
		}
		c.msgpack = codec.AppendAggregate(c.msgpack[:0], c.flows)
		c.hasMsgpack = true
		w.stats.aggregateBytes.Store(int64(len(c.msgpack)))
	}
	return fn(c.msgpack, c.version)
}

// refreshLocked makes the cache hold the aggregate of version v or newer,
// copying it from the state if it holds an older one. The caller holds
// cacheMu.
func (w *Worker) refreshLocked(ctx context.Context, v flowstate.Version) error {
	c := &w.cache
	if c.valid && c.version == v {
		return nil
	}
	s, err := w.mgr.Snapshot(ctx, c.flows)
	if err != nil {
		return err
	}
	c.valid, c.version, c.flows = true, s.Version, s.Flows
	c.hasMsgpack, c.hasJSON, c.chunks = false, false, nil
	return nil
}

// headerSize is the size of h on the wire, which counts against the
// connection's max payload with the body.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}
