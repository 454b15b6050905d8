package loadgen

import (
	"context"
	"fmt"

	"flowstate/codec"
	"flowstate/protocol"
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

// Sync sends the next report of the first node as a request, on the
// generator's connection, and waits for its acknowledgement, bounded by ctx
// and Config.Timeout. The worker handles its subscription in order and NATS
// keeps the order of one connection's messages, so when it returns nil,
// every report published before was handled: Check then expects each
// node's last published report. A worker with a full backlog may drop the
// sync report itself (a timeout): wait until it has taken what was
// published before calling Sync.
func (g *Generator) Sync(ctx context.Context) error {
	var scratch []byte
	var rep codec.Report
	n := &g.nodes[0]
	body := g.p.body(&scratch, &rep, 0, n.sent)
	n.sent++
	if err := g.request(ctx, g.p.subjects[0], body); err != nil {
		n.last = failed
		return fmt.Errorf("loadgen: sync: %w", err)
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
