package consumer

import (
	"context"
	"errors"
	"fmt"
	"mime"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"flowstate/codec"
	"flowstate/flowstate"
)

// handleGet answers a get with the aggregate, msgpack unless the request
// accepts application/json.
func (w *Worker) handleGet(req micro.Request) {
	asJSON := wantsJSON(req.Headers().Get(HeaderAccept))
	body, v, err := w.encoded(context.Background(), asJSON)
	if err != nil {
		w.stats.getErrors.Add(1)
		vd := judge(err)
		w.log.Error("get failed", "subject", req.Subject(), "err", err)
		_ = req.Error(fmt.Sprint(vd.code), "state unavailable: "+vd.reason, nil)
		return
	}
	h := versionHeader(v)
	if asJSON {
		h.Set(HeaderContentType, ContentTypeJSON)
	} else {
		h.Set(HeaderContentType, ContentTypeMsgpack)
	}
	if int64(len(body)+headerSize(h)) > w.nc.MaxPayload() {
		err = nats.ErrMaxPayload
	} else {
		err = req.Respond(body, micro.WithHeaders(micro.Headers(h)))
	}
	switch {
	case err == nil:
		w.stats.gets.Add(1)
		return
	case errors.Is(err, nats.ErrMaxPayload):
		w.stats.getErrors.Add(1)
		reason := fmt.Sprintf("aggregate of %d bytes exceeds the connection's max payload of %d bytes", len(body), w.nc.MaxPayload())
		w.logThrottled(errorLevel, "get answered 413", "subject", req.Subject(), "err", reason)
		_ = req.Error("413", reason, nil)
	default:
		w.stats.getErrors.Add(1)
		w.logThrottled(errorLevel, "get reply failed", "subject", req.Subject(), "err", err)
	}
}

// wantsJSON reports whether an Accept header asks for JSON.
func wantsJSON(accept string) bool {
	if accept == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(accept)
	return err == nil && mt == ContentTypeJSON
}

// encoded returns the current aggregate in the asked encoding with its
// version, encoding it at most once per version and format.
func (w *Worker) encoded(ctx context.Context, asJSON bool) ([]byte, flowstate.Version, error) {
	v, err := w.mgr.Version(ctx)
	if err != nil {
		return nil, flowstate.Version{}, err
	}
	w.cacheMu.Lock()
	defer w.cacheMu.Unlock()
	c := &w.cache
	if !c.valid || c.version != v {
		s, err := w.mgr.Snapshot(ctx, c.flows)
		if err != nil {
			return nil, flowstate.Version{}, err
		}
		*c = encoding{valid: true, version: s.Version, flows: s.Flows}
	}
	if asJSON {
		if c.json == nil {
			c.json = flowstate.AppendJSON(nil, c.flows)
		}
		return c.json, c.version, nil
	}
	if c.msgpack == nil {
		c.msgpack = codec.AppendAggregate(nil, c.flows)
	}
	return c.msgpack, c.version, nil
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
