package consumer

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// maxViewEcho bounds what an error reply echoes of an unknown view.
const maxViewEcho = 32

// view returns the view a get asks for (Flow-State-View), or a bad request
// for one that PROTOCOL.md does not name.
func view(req micro.Request) (string, error) {
	switch v := req.Headers().Get(protocol.HeaderView); v {
	case "", protocol.ViewSeed:
		return protocol.ViewSeed, nil
	case protocol.ViewStats:
		return v, nil
	default:
		return "", &badReport{kind: "bad_request", field: protocol.HeaderView,
			reason: fmt.Sprintf("unknown view %q: the views are %s and %s", cut(v, maxViewEcho), protocol.ViewSeed, protocol.ViewStats)}
	}
}

// serveStats answers a get of the stats view (PROTOCOL.md v3): msgpack,
// JSON when asked, or msgpack chunks when asked. It is taken once the read
// barrier has passed, and encoded per request: a frontend asks for it when
// it shows the stats, not on every update.
func (w *Worker) serveStats(req micro.Request, asJSON, chunked bool) error {
	s, err := w.mgr.Stats(w.ctx)
	if err != nil {
		return err
	}
	h := versionHeader(s.Version)
	// A view too large for one message is refused from its length, before
	// any of it is rendered.
	if asJSON {
		h.Set(protocol.HeaderContentType, protocol.ContentTypeJSON)
		n := flowstate.StatsJSONLen(s.Flows, s.Health)
		if err := w.fitsWhole(h, n); err != nil {
			return err
		}
		return w.respondWhole(req, h, flowstate.AppendStatsJSON(make([]byte, 0, n), s.Flows, s.Health))
	}
	h.Set(protocol.HeaderContentType, protocol.ContentTypeMsgpack)
	if !chunked {
		n := codec.StatsLen(s.Flows, s.Health)
		if err := w.fitsWhole(h, n); err != nil {
			return err
		}
		return w.respondWhole(req, h, codec.AppendStats(make([]byte, 0, n), s.Flows, s.Health))
	}
	return w.serveStatsChunks(req, h, s)
}

// respondWhole answers req with body in one message, or 413 past the
// connection's max payload.
func (w *Worker) respondWhole(req micro.Request, h nats.Header, body []byte) error {
	if err := w.fitsWhole(h, len(body)); err != nil {
		return err
	}
	return req.Respond(body, micro.WithHeaders(micro.Headers(h)))
}

// fitsWhole returns the 413 of a body of n bytes that does not fit one
// message with headers h, or nil.
func (w *Worker) fitsWhole(h nats.Header, n int) error {
	if int64(n+headerSize(h)) > w.nc.MaxPayload() {
		return &tooLargeError{size: n, max: w.nc.MaxPayload()}
	}
	return nil
}

// serveStatsChunks answers with the stats view in chunks of ascending flow
// id ranges, each within the max payload with its headers.
func (w *Worker) serveStatsChunks(req micro.Request, h nats.Header, s state.Stats) error {
	budget := w.nc.MaxPayload() - int64(headerSize(h)+maxChunkHeader)
	ends, err := codec.SplitStats(nil, s.Flows, s.Health, int(min(max(budget, 0), 1<<31-1)))
	if err != nil {
		return fmt.Errorf("consumer: split the stats view: %w", err)
	}
	var from codec.StatsChunk
	var buf []byte
	for i, end := range ends {
		buf = codec.AppendStats(buf[:0], s.Flows[from.Flows:end.Flows], s.Health[from.Stats:end.Stats])
		from = end
		if err := w.sendChunk(req, s.Version, i, len(ends), buf); err != nil {
			return err
		}
	}
	w.stats.chunkedGets.Add(1)
	return nil
}
