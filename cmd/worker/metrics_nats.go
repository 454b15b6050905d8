package main

import (
	"errors"
	"io"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// maxPendingCIDs bounds the connections whose close reason natsEvents has
// yet to learn from the embedded server.
const maxPendingCIDs = 64

// Causes of a disconnection, the cause label of flowstate_nats_disconnects_total.
const (
	// causeServerClosed: the server closed the connection without a word
	// (io.EOF). A server that drops the worker as a slow consumer does that,
	// as does a server that stops.
	causeServerClosed = "server_closed"
	// causeStale: the server stopped answering pings.
	causeStale = "stale"
	causeOther = "other"
)

// natsEvents counts the connection's unexpected disconnections by cause, and
// those that the embedded server made because the worker was a slow
// consumer: a server sends no error before it drops a slow consumer, so the
// client sees only io.EOF; only the server knows the reason, and the worker
// can ask it only when it is the embedded one.
type natsEvents struct {
	srv *server.Server // the embedded server, or nil

	mu          sync.Mutex // guards the fields below
	cid         uint64     // the connection's client id on its server now
	pending     []uint64   // client ids closed on srv, close reason not yet looked up
	byCause     map[string]uint64
	slowDropped uint64 // disconnections srv made because the worker was a slow consumer
}

// watchNATS counts nc's disconnections from now on. It chains its handlers
// before those nc already has. srv is the embedded server, or nil.
func watchNATS(nc *nats.Conn, srv *server.Server) *natsEvents {
	e := &natsEvents{srv: srv, byCause: map[string]uint64{causeServerClosed: 0, causeStale: 0, causeOther: 0}}
	e.cid, _ = nc.GetClientID()
	onDisconnect, onReconnect := nc.DisconnectErrHandler(), nc.ReconnectHandler()
	// Both run on the connection's one callback goroutine, in order: the
	// client id recorded at a reconnection is the one that the next
	// disconnection closes.
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		e.disconnected(err)
		if onDisconnect != nil {
			onDisconnect(c, err)
		}
	})
	nc.SetReconnectHandler(func(c *nats.Conn) {
		e.mu.Lock()
		e.cid, _ = c.GetClientID()
		e.mu.Unlock()
		if onReconnect != nil {
			onReconnect(c)
		}
	})
	return e
}

// disconnected counts a disconnection; err is nil when the worker closed
// the connection itself.
func (e *natsEvents) disconnected(err error) {
	if err == nil {
		return
	}
	cause := causeOther
	switch {
	case errors.Is(err, io.EOF):
		cause = causeServerClosed
	case errors.Is(err, nats.ErrStaleConnection):
		cause = causeStale
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byCause[cause]++
	if e.srv != nil && e.cid != 0 {
		if len(e.pending) == maxPendingCIDs {
			e.pending = e.pending[1:]
		}
		e.pending = append(e.pending, e.cid)
	}
}

// counts returns the disconnections by cause and the slow-consumer drops
// known so far, after looking up the close reasons that the embedded server
// has recorded since the last call.
func (e *natsEvents) counts() (byCause map[string]uint64, slowDropped uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kept := e.pending[:0]
	for _, cid := range e.pending {
		reason, known := e.closeReason(cid)
		switch {
		case !known:
			kept = append(kept, cid) // the server records it asynchronously
		case strings.HasPrefix(reason, "Slow Consumer"):
			e.slowDropped++
		}
	}
	e.pending = kept
	byCause = make(map[string]uint64, len(e.byCause))
	for k, v := range e.byCause {
		byCause[k] = v
	}
	return byCause, e.slowDropped
}

// closeReason is the reason the embedded server gives for closing
// connection cid, if it has recorded it.
func (e *natsEvents) closeReason(cid uint64) (reason string, known bool) {
	cz, err := e.srv.Connz(&server.ConnzOptions{CID: cid, State: server.ConnClosed})
	if err != nil || len(cz.Conns) == 0 {
		return "", false
	}
	return cz.Conns[0].Reason, true
}
