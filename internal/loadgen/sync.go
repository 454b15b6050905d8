package loadgen

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/protocol"
)

// WarmUp publishes one report of every node, fire and forget whatever the
// mode, then Syncs: afterwards the worker holds every node's flows.
func (g *Generator) WarmUp(ctx context.Context) error {
	var scratch []byte
	var rep codec.Report
	for i := range g.nodes {
		n := &g.nodes[i]
		if err := g.nc.Publish(g.p.subjects[i], g.p.body(&scratch, &rep, i, n.sent)); err != nil {
			return fmt.Errorf("loadgen: warm-up: publish on %s: %w", g.p.subjects[i], err)
		}
		n.sent++
		n.last = published
	}
	if err := g.Sync(ctx); err != nil {
		return fmt.Errorf("loadgen: warm-up: %w", err)
	}
	return nil
}

// syncAttempts bounds the requests of one Sync.
const syncAttempts = 12

// Sync sends the next report of the first node as a request, on the
// generator's connection, and waits for its acknowledgement. The worker
// handles its subscription in order and NATS keeps the order of one
// connection's messages, so when it returns nil, every report published
// before was handled: Check then expects each node's last published report.
//
// Each request is bounded by Config.Timeout. A worker still working through
// a backlog, or one that dropped the sync report as a slow consumer, lets
// it time out: Sync then sends another, up to syncAttempts requests, while
// ctx lasts. Waiting until the worker has taken what was published (its
// metrics say so) before calling Sync avoids the drop.
func (g *Generator) Sync(ctx context.Context) error {
	var scratch []byte
	var rep codec.Report
	n := &g.nodes[0]
	for attempt := 1; ; attempt++ {
		body := g.p.body(&scratch, &rep, 0, n.sent)
		n.sent++
		err := g.request(ctx, g.p.subjects[0], body)
		if err == nil {
			break
		}
		n.last = failed
		if attempt == syncAttempts || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("loadgen: sync, request %d: %w", attempt, err)
		}
	}
	for i := range g.nodes {
		if m := &g.nodes[i]; m.last == published || i == 0 {
			m.known, m.last = m.sent, handled
		}
	}
	return nil
}

// request sends body as a request on subject, bounded by ctx and the
// timeout, and checks the reply for the service error headers.
func (g *Generator) request(ctx context.Context, subject string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	reply, err := g.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return fmt.Errorf("loadgen: %s: %w", subject, err)
	}
	if code := reply.Header.Get(protocol.HeaderErrorCode); code != "" {
		return fmt.Errorf("%w: %s: %s %s", ErrRejected, subject, code, reply.Header.Get(protocol.HeaderError))
	}
	return nil
}
