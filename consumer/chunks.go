package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// maxChunkHeader is the longest Flow-State-Chunk header line: "i/n" with at
// most 10 digits each.
const maxChunkHeader = len(protocol.HeaderChunk) + len(": ") + 10 + 1 + 10 + len("\r\n")

// serveChunkedGet answers a get that asked for chunks: every chunk of one
// state, in order, on the request's reply subject.
func (w *Worker) serveChunkedGet(ctx context.Context, req micro.Request) error {
	chunks, v, err := w.chunksOf(ctx)
	if err != nil {
		return err
	}
	for i, body := range chunks {
		if err := w.sendChunk(req, v, i, len(chunks), body); err != nil {
			return err
		}
	}
	w.stats.chunkedGets.Add(1)
	return nil
}

// sendChunk sends chunk i of n of a chunked get at version v: the first as
// the request's reply, the others on its reply subject.
func (w *Worker) sendChunk(req micro.Request, v flowstate.Version, i, n int, body []byte) error {
	h := versionHeader(v)
	h.Set(protocol.HeaderContentType, protocol.ContentTypeMsgpack)
	h.Set(protocol.HeaderChunk, strconv.Itoa(i+1)+"/"+strconv.Itoa(n))
	var err error
	if i == 0 {
		err = req.Respond(body, micro.WithHeaders(micro.Headers(h)))
	} else {
		err = w.nc.PublishMsg(&nats.Msg{Subject: req.Reply(), Header: h, Data: body})
	}
	if err != nil {
		return fmt.Errorf("%w: chunk %d of %d: %w", micro.ErrRespond, i+1, n, err)
	}
	w.stats.chunksSent.Add(1)
	return nil
}

// chunksOf returns the current aggregate split into msgpack chunks that fit
// the connection's max payload with their headers, and its version. Each
// version is split and encoded once; the chunks returned are never
// modified, so the caller may send them without a lock.
func (w *Worker) chunksOf(ctx context.Context) ([][]byte, flowstate.Version, error) {
	v, err := w.mgr.Version(ctx)
	if err != nil {
		return nil, flowstate.Version{}, err
	}
	w.cacheMu.Lock()
	defer w.cacheMu.Unlock()
	if err := w.refreshLocked(ctx, v); err != nil {
		return nil, flowstate.Version{}, err
	}
	c := &w.cache
	h := versionHeader(c.version)
	h.Set(protocol.HeaderContentType, protocol.ContentTypeMsgpack)
	budget := w.nc.MaxPayload() - int64(headerSize(h)+maxChunkHeader)
	if c.chunks == nil || c.chunkBudget != budget {
		if budget <= 0 {
			return nil, flowstate.Version{}, errors.New("consumer: max payload leaves no room for a chunk")
		}
		ends, err := codec.SplitAggregate(nil, c.flows, int(min(budget, 1<<31-1)))
		if err != nil {
			return nil, flowstate.Version{}, fmt.Errorf("consumer: split the aggregate: %w", err)
		}
		buf := make([]byte, 0, codec.AggregateLen(c.flows)+len(ends)*64)
		chunks := make([][]byte, len(ends))
		start := 0
		for i, end := range ends {
			from := len(buf)
			buf = codec.AppendAggregate(buf, c.flows[start:end])
			chunks[i] = buf[from:len(buf):len(buf)]
			start = end
		}
		c.chunks, c.chunkBudget = chunks, budget
	}
	return c.chunks, c.version, nil
}
