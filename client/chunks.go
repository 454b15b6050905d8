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

// getChunked sends a get with Flow-State-Chunks: 1 and joins the chunks of
// the reply on a private inbox, bounded by ctx and the client's timeout.
// chunked reports whether the worker answered in chunks (it speaks v2); a
// single reply without Flow-State-Chunk is a v1 worker's, taken as is.
func (c *Client) getChunked(ctx context.Context) (s State, chunked bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return State{}, false, fmt.Errorf("client: %s: %w", c.getSubject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req := nats.NewMsg(c.getSubject)
	req.Reply = inbox
	req.Header.Set(protocol.HeaderChunks, "1")
	if err := c.nc.PublishMsg(req); err != nil {
		return State{}, false, fmt.Errorf("client: %s: %w", c.getSubject, err)
	}
	var j joiner
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return State{}, false, fmt.Errorf("%w on %s (%w)", ErrNoWorker, c.getSubject, err)
		case err != nil:
			return State{}, false, fmt.Errorf("client: %s: %w", c.getSubject, err)
		}
		if code := msg.Header.Get(protocol.HeaderErrorCode); code != "" {
			n, _ := strconv.Atoi(code)
			return State{}, false, &ServiceError{Subject: c.getSubject, Code: n, Reason: msg.Header.Get(protocol.HeaderError)}
		}
		if j.n == 0 && msg.Header.Get(protocol.HeaderChunk) == "" {
			s, err := decodeState(msg)
			return s, false, err
		}
		done, err := j.add(msg)
		if err != nil {
			return State{}, true, err
		}
		if done {
			return j.state(), true, nil
		}
	}
}

// joiner joins the chunks of one snapshot.
type joiner struct {
	version flowstate.Version
	i, n    int // chunks received, and announced
	value   flowstate.FlowStateValue
	last    int64 // the highest flow id so far; -1 before the first
}

// add takes the next chunk and reports whether it was the last.
func (j *joiner) add(msg *nats.Msg) (bool, error) {
	v, err := parseVersion(msg.Header)
	if err != nil {
		return false, err
	}
	i, n, err := parseChunk(msg.Header.Get(protocol.HeaderChunk))
	if err != nil {
		return false, err
	}
	if j.n == 0 {
		j.version, j.n, j.last = v, n, -1
	}
	switch {
	case v != j.version:
		return false, fmt.Errorf("%w: chunk %d/%d is of %s revision %d, chunk 1 of %s revision %d", ErrBadReply, i, n, v.Epoch, v.Revision, j.version.Epoch, j.version.Revision)
	case n != j.n || i != j.i+1:
		return false, fmt.Errorf("%w: chunk %d/%d after chunk %d/%d", ErrBadReply, i, n, j.i, j.n)
	}
	val, err := codec.DecodeAggregate(msg.Data)
	if err != nil {
		return false, fmt.Errorf("%w: chunk %d/%d: %w", ErrBadReply, i, n, err)
	}
	lo, hi := idRange(val)
	if lo <= j.last {
		return false, fmt.Errorf("%w: chunk %d/%d starts at flow %d, at or below the previous chunk's %d", ErrBadReply, i, n, lo, j.last)
	}
	if hi >= 0 {
		j.last = hi
	}
	if j.i == 0 {
		j.value = val
	} else {
		maps.Copy(j.value.StateSize, val.StateSize)
		maps.Copy(j.value.LastExecTimeMap, val.LastExecTimeMap)
		maps.Copy(j.value.StartTimeMap, val.StartTimeMap)
	}
	j.i = i
	return i == n, nil
}

// state returns the joined snapshot.
func (j *joiner) state() State { return State{Version: j.version, Value: j.value} }

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

// parseChunk parses a Flow-State-Chunk header, "<i>/<n>" with 1 <= i <= n.
func parseChunk(h string) (i, n int, err error) {
	a, b, ok := strings.Cut(h, "/")
	if ok {
		i, err = strconv.Atoi(a)
		if err == nil {
			n, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || i < 1 || i > n || n > maxChunks {
		return 0, 0, fmt.Errorf("%w: %s %q is not <i>/<n>", ErrBadReply, protocol.HeaderChunk, h)
	}
	return i, n, nil
}
