package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// maxChunks bounds the chunks one snapshot may claim, so that a bad header
// cannot keep Get reading forever (at 1 MB a chunk, 1,000,000 flows take
// about 36).
const maxChunks = 1 << 20

// getChunks sends a get of view (protocol.ViewSeed: no Flow-State-View
// header) with Flow-State-Chunks: 1 and passes the messages of the reply,
// on a private inbox, to take in order until take says one was the last;
// bounded by ctx and the client's timeout, and by MaxGetBytes: the chunks
// of one reply together, past it, fail with an error wrapping ErrLimit. A
// reply with the service error
// headers returns a *ServiceError; no worker listening, an error wrapping
// ErrNoWorker.
func (c *Client) getChunks(ctx context.Context, view string, take func(*nats.Msg) (last bool, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("client: %s: %w", c.getSubject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// What waits unread is bounded too: past it, the library drops
	// chunks and the get fails on the gap (or times out).
	if err := sub.SetPendingLimits(-1, c.maxGetBytes); err != nil {
		return fmt.Errorf("client: %s: %w", c.getSubject, err)
	}
	req := nats.NewMsg(c.getSubject)
	req.Reply = inbox
	req.Header.Set(protocol.HeaderChunks, "1")
	if view != protocol.ViewSeed {
		req.Header.Set(protocol.HeaderView, view)
	}
	if err := c.nc.PublishMsg(req); err != nil {
		return fmt.Errorf("client: %s: %w", c.getSubject, err)
	}
	total := 0
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return fmt.Errorf("%w on %s (%w)", ErrNoWorker, c.getSubject, err)
		case errors.Is(err, nats.ErrSlowConsumer):
			return fmt.Errorf("%w: the chunks waiting for %s passed %d bytes (MaxGetBytes) (%w)", ErrLimit, c.getSubject, c.maxGetBytes, err)
		case err != nil:
			return fmt.Errorf("client: %s: %w", c.getSubject, err)
		}
		if code := msg.Header.Get(protocol.HeaderErrorCode); code != "" {
			return newServiceError(c.getSubject, code, msg.Header.Get(protocol.HeaderError))
		}
		if total += len(msg.Data); total > c.maxGetBytes {
			return fmt.Errorf("%w: the reply to %s passed %d bytes (MaxGetBytes)", ErrLimit, c.getSubject, c.maxGetBytes)
		}
		if last, err := take(msg); last || err != nil {
			return err
		}
	}
}

// getChunked takes a chunked snapshot of GreptimeDB's value. chunked
// reports whether the worker answered in chunks (it speaks v2); a single
// reply without Flow-State-Chunk is a v1 worker's, taken as is.
func (c *Client) getChunked(ctx context.Context) (s State, chunked bool, err error) {
	var j chunkSeq
	var value flowstate.FlowStateValue
	flows := 0
	err = c.getChunks(ctx, protocol.ViewSeed, func(msg *nats.Msg) (bool, error) {
		if j.n == 0 && msg.Header.Values(protocol.HeaderChunk) == nil {
			s, err = decodeState(msg)
			if err == nil {
				err = c.checkFlows(s.Value.Len())
			}
			return true, err
		}
		chunked = true
		val, last, err := nextChunk(&j, msg, codec.DecodeAggregate, idRange)
		if err != nil {
			return false, err
		}
		// Chunks name disjoint ranges of flows: their counts add up.
		if flows += val.Len(); flows > c.maxFlows {
			return false, c.checkFlows(flows)
		}
		switch {
		case j.i == 1:
			value = val
		default:
			maps.Copy(value.StateSize, val.StateSize)
			maps.Copy(value.LastExecTimeMap, val.LastExecTimeMap)
			maps.Copy(value.StartTimeMap, val.StartTimeMap)
		}
		if last {
			s = State{Version: j.version, Value: value}
		}
		return last, nil
	})
	if err != nil {
		return State{}, chunked, err
	}
	return s, chunked, nil
}

// checkFlows returns an error wrapping ErrLimit when n flows are past
// MaxFlows.
func (c *Client) checkFlows(n int) error {
	if n > c.maxFlows {
		return fmt.Errorf("%w: the reply to %s names %d flows or more, past %d (MaxFlows)", ErrLimit, c.getSubject, n, c.maxFlows)
	}
	return nil
}

// chunkSeq checks that the chunks of one snapshot come in order, all of
// one version, each with flow ids above the chunk before.
type chunkSeq struct {
	version flowstate.Version
	i, n    int   // chunks received, and announced
	last    int64 // the highest flow id so far; -1 before the first
}

// nextChunk checks that msg is the next chunk of j, decodes its body with
// decode and checks that its flow ids, which ids tells, ascend past the
// chunks before; last says it is the last chunk.
func nextChunk[V any](j *chunkSeq, msg *nats.Msg, decode func([]byte) (V, error), ids func(V) (lo, hi int64)) (v V, last bool, err error) {
	i, n, err := j.next(msg)
	if err != nil {
		return v, false, err
	}
	if v, err = decode(msg.Data); err != nil {
		return v, false, fmt.Errorf("%w: chunk %d/%d: %w", ErrBadReply, i, n, err)
	}
	if err := j.ascend(ids(v)); err != nil {
		return v, false, err
	}
	return v, i == n, nil
}

// next checks that msg is the next chunk and returns its index and the
// number of chunks.
func (j *chunkSeq) next(msg *nats.Msg) (i, n int, err error) {
	v, err := parseVersion(msg.Header)
	if err != nil {
		return 0, 0, err
	}
	i, n, err = parseChunk(msg.Header.Get(protocol.HeaderChunk))
	if err != nil {
		return 0, 0, err
	}
	if j.n == 0 {
		j.version, j.n, j.last = v, n, -1
	}
	switch {
	case v != j.version:
		return 0, 0, fmt.Errorf("%w: chunk %d/%d is of %s revision %d, chunk 1 of %s revision %d", ErrBadReply, i, n, v.Epoch, v.Revision, j.version.Epoch, j.version.Revision)
	case n != j.n || i != j.i+1:
		return 0, 0, fmt.Errorf("%w: chunk %d/%d after chunk %d/%d", ErrBadReply, i, n, j.i, j.n)
	}
	j.i = i
	return i, n, nil
}

// ascend checks that the chunk just taken, whose flow ids span lo..hi
// ((MaxInt64, -1) when it has none), starts above the chunks before.
func (j *chunkSeq) ascend(lo, hi int64) error {
	if lo <= j.last {
		return fmt.Errorf("%w: chunk %d/%d starts at flow %d, at or below the previous chunk's %d", ErrBadReply, j.i, j.n, lo, j.last)
	}
	if hi >= 0 {
		j.last = hi
	}
	return nil
}

// idRange returns the lowest and highest flow id of v, (MaxInt64, -1) when
// empty.
func idRange(v flowstate.FlowStateValue) (lo, hi int64) {
	lo, hi = math.MaxInt64, -1
	note := func(id flowstate.FlowID) {
		lo, hi = min(lo, int64(id)), max(hi, int64(id))
	}
	for id := range v.StateSize {
		note(id)
	}
	for id := range v.LastExecTimeMap {
		note(id)
	}
	for id := range v.StartTimeMap {
		note(id)
	}
	return lo, hi
}

// parseChunk parses a Flow-State-Chunk header, "<i>/<n>": decimal digits
// without sign or leading zero, 1 <= i <= n <= maxChunks.
func parseChunk(h string) (i, n int, err error) {
	a, b, ok := strings.Cut(h, "/")
	if ok && canonicalUint(a) && canonicalUint(b) {
		i, err = strconv.Atoi(a)
		if err == nil {
			n, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || !canonicalUint(a) || !canonicalUint(b) || i < 1 || i > n || n > maxChunks {
		return 0, 0, fmt.Errorf("%w: %s %q is not <i>/<n>", ErrBadReply, protocol.HeaderChunk, h)
	}
	return i, n, nil
}

// canonicalUint reports whether s is decimal digits without a leading
// zero (or "0").
func canonicalUint(s string) bool {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
