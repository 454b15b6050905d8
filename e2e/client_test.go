package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"
)

// Header names and values of PROTOCOL.md.
const (
	hdrRevision    = "Flow-State-Revision"
	hdrEpoch       = "Flow-State-Epoch"
	hdrContentType = "Content-Type"
	hdrAccept      = "Accept"
	contentMsgpack = "application/msgpack"
	contentJSON    = "application/json"
	emptyValueJSON = `{"state_size":{},"last_exec_time_map":{},"start_time_map":{}}`
)

// connect opens a client connection to a server on 127.0.0.1; Cleanup
// closes it.
func connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	require.True(t, strings.HasPrefix(url, "nats://127.0.0.1:"), "tests only talk to 127.0.0.1, not %s", url)
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(startTimeout)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// client talks to one worker the way flownodes and frontends do.
type client struct {
	t      testing.TB
	nc     *nats.Conn
	prefix string
}

// newClient connects to the worker's server.
func newClient(t testing.TB, w *workerProc, opts ...nats.Option) *client {
	t.Helper()
	return &client{t: t, nc: connect(t, w.URL, opts...), prefix: w.Prefix}
}

// version is a state version as the headers carry it.
type version struct {
	Epoch    string
	Revision uint64
}

// parseVersion reads Flow-State-Epoch and Flow-State-Revision, requiring a
// non-empty epoch and a canonical decimal revision.
func parseVersion(t testing.TB, h nats.Header) version {
	t.Helper()
	epoch := h.Get(hdrEpoch)
	require.NotEmpty(t, epoch, "%s header; headers: %v", hdrEpoch, h)
	rs := h.Get(hdrRevision)
	rev, err := strconv.ParseUint(rs, 10, 64)
	require.NoError(t, err, "%s header %q is not a decimal uint64", hdrRevision, rs)
	require.Equal(t, strconv.FormatUint(rev, 10), rs, "%s header is not canonical decimal", hdrRevision)
	return version{Epoch: epoch, Revision: rev}
}

func (c *client) heartbeatSubject(node uint64) string {
	return c.prefix + ".heartbeat." + strconv.FormatUint(node, 10)
}

// request sends body to subject as a request and returns the reply.
func (c *client) request(subject string, body []byte, h nats.Header) *nats.Msg {
	c.t.Helper()
	msg, err := c.nc.RequestMsg(&nats.Msg{Subject: subject, Data: body, Header: h}, requestTimeout)
	require.NoError(c.t, err, "request on %s", subject)
	return msg
}

// report sends a report of node as a request, requires an ack and returns
// the acked version.
func (c *client) report(node uint64, body []byte) version {
	c.t.Helper()
	msg := c.request(c.heartbeatSubject(node), body, nil)
	return requireAck(c.t, msg)
}

// requireAck requires that msg acknowledges an applied report: an empty
// body, no error, a version.
func requireAck(t testing.TB, msg *nats.Msg) version {
	t.Helper()
	require.Empty(t, msg.Header.Get(micro.ErrorHeader), "report rejected (code %s)", msg.Header.Get(micro.ErrorCodeHeader))
	require.Empty(t, msg.Header.Get(micro.ErrorCodeHeader), "error code on an ack")
	require.Empty(t, msg.Data, "ack body")
	return parseVersion(t, msg.Header)
}

// rejection is a report answered with the NATS service error headers.
type rejection struct {
	Code   string
	Reason string
}

// reject sends a report to subject as a request and requires an error reply.
func (c *client) reject(subject string, body []byte) rejection {
	c.t.Helper()
	msg := c.request(subject, body, nil)
	r := rejection{Code: msg.Header.Get(micro.ErrorCodeHeader), Reason: msg.Header.Get(micro.ErrorHeader)}
	require.NotEmpty(c.t, r.Code, "no %s on the reply to a bad report; headers %v", micro.ErrorCodeHeader, msg.Header)
	return r
}

// aggregateMsg is a get reply or a published update.
type aggregateMsg struct {
	version
	ContentType string
	Body        []byte
}

func parseAggregateMsg(t testing.TB, msg *nats.Msg) aggregateMsg {
	t.Helper()
	require.Empty(t, msg.Header.Get(micro.ErrorHeader), "error reply (code %s)", msg.Header.Get(micro.ErrorCodeHeader))
	return aggregateMsg{
		version:     parseVersion(t, msg.Header),
		ContentType: msg.Header.Get(hdrContentType),
		Body:        msg.Data,
	}
}

// getAccept sends a get with the given Accept header ("" for none).
func (c *client) getAccept(accept string) aggregateMsg {
	c.t.Helper()
	var h nats.Header
	if accept != "" {
		h = nats.Header{hdrAccept: []string{accept}}
	}
	return parseAggregateMsg(c.t, c.request(c.prefix+".state.get", nil, h))
}

// get sends a get without an Accept header and requires a msgpack reply.
func (c *client) get() aggregateMsg {
	c.t.Helper()
	m := c.getAccept("")
	require.Equal(c.t, contentMsgpack, m.ContentType)
	return m
}

// getJSON sends a get that accepts JSON and requires a JSON reply.
func (c *client) getJSON() aggregateMsg {
	c.t.Helper()
	m := c.getAccept(contentJSON)
	require.Equal(c.t, contentJSON, m.ContentType)
	return m
}

// requireState gets the aggregate in both encodings and requires that it is
// want: decoded by the msgpack library, byte for byte the canonical msgpack
// form, and byte for byte the serde_json form. It returns the version.
func (c *client) requireState(want flowState) version {
	c.t.Helper()
	want = want.normalized()
	m := c.get()
	require.Equal(c.t, want, decodeAggregate(c.t, m.Body), "aggregate")
	require.Equal(c.t, canonicalMsgpack(want), m.Body, "msgpack bytes")
	j := c.getJSON()
	require.Equal(c.t, string(serdeJSON(want)), string(j.Body), "JSON bytes")
	require.Equal(c.t, m.version, j.version, "version of the msgpack and JSON gets")
	return m.version
}

// updates receives the aggregates published on <prefix>.state.
type updates struct {
	t   testing.TB
	ch  chan *nats.Msg
	sub *nats.Subscription
}

// subscribeUpdates subscribes to <prefix>.state, and flushes so that the
// subscription is in place before the test sends anything.
func (c *client) subscribeUpdates() *updates {
	c.t.Helper()
	u := &updates{t: c.t, ch: make(chan *nats.Msg, 1<<16)}
	sub, err := c.nc.ChanSubscribe(c.prefix+".state", u.ch)
	require.NoError(c.t, err)
	require.NoError(c.t, c.nc.Flush())
	u.sub = sub
	return u
}

// next returns the next update, failing the test if none arrives in time.
func (u *updates) next() aggregateMsg {
	u.t.Helper()
	select {
	case msg := <-u.ch:
		m := parseAggregateMsg(u.t, msg)
		require.Equal(u.t, contentMsgpack, m.ContentType, "Content-Type of an update")
		return m
	case <-time.After(messageTimeout):
		require.FailNow(u.t, "no update on the state subject", "within %v", messageTimeout)
		return aggregateMsg{}
	}
}

// until returns every update up to and including the first one at
// revision rev or later, in arrival order.
func (u *updates) until(rev uint64) []aggregateMsg {
	u.t.Helper()
	var got []aggregateMsg
	for {
		m := u.next()
		got = append(got, m)
		if m.Revision >= rev {
			return got
		}
	}
}
