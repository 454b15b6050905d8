package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// The parts stop in this order (the reverse of their start), within
// shutdownTimeout in all: the metrics server; the worker (stop intake and
// drain the reports received: those not applied within intakeShare of the
// time left are dropped, their nodes' next heartbeats heal the state; then
// the last publish); the shared state (the publisher lease handed over);
// the connection (drained); the embedded server. Each stop runs once,
// from its actor (Run) or from Close.

// intakeShare is the share of the time left given to the worker's drain of
// received reports; the rest is for the last publish, the connection and
// the embedded server.
const intakeShare = 0.6

// stopWorker stops intake, drains the reports received and publishes the
// last state.
func (m *Main) stopWorker(ctx context.Context) error {
	w := m.worker
	if w == nil {
		return nil
	}
	m.worker = nil
	if m.nc != nil && !m.nc.IsConnected() && !chanClosed(m.nc.up) {
		// Never connected (the server refuses the credentials, or is not
		// there): nothing was received, and a drain would only wait for a
		// server until ctx ends. Close instead.
		m.nc.closing.Store(true)
		m.nc.Close()
	}
	wctx, cancel := shareOf(ctx, intakeShare)
	defer cancel()
	err := w.Shutdown(wctx)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		s := w.Stats()
		m.Log.Warn("reports received but not applied in time are dropped; their nodes' next heartbeats heal the state",
			slog.Uint64("received", s.Received), slog.Uint64("applied", s.Applied), slog.Uint64("rejected", s.Rejected))
		m.dropped = true
		return nil
	}
	return err
}

// stopState hands the publisher lease of a shared store over to another
// worker and closes the store.
func (m *Main) stopState(ctx context.Context) error {
	err := m.stopReplica(ctx)
	if m.js != nil {
		m.js.Close()
		m.js = nil
	}
	if m.storeNC != nil {
		m.storeNC.closing.Store(true)
		m.storeNC.Close()
		m.storeNC = nil
	}
	return err
}

// stopConn drains the connection and waits until it is closed, under ctx.
// After an incomplete drain of the heartbeats, it flushes what was sent
// (acks, the last state) and closes, dropping what is still pending.
func (m *Main) stopConn(ctx context.Context) error {
	nc := m.nc
	if nc == nil || nc.IsClosed() {
		return nil
	}
	nc.closing.Store(true)
	if m.dropped {
		fctx, cancel := shareOf(ctx, 0.5)
		defer cancel()
		if err := nc.FlushWithContext(fctx); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			m.Log.Warn("flush before close failed", slog.Any("err", err))
		}
		nc.Close()
		return nil
	}
	if err := nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		nc.Close()
	}
	select {
	case <-nc.closed:
		return nil
	case <-ctx.Done():
		nc.Close()
		return fmt.Errorf("NATS drain: %w", ctx.Err())
	}
}

// stopServer stops the embedded server.
func (m *Main) stopServer(context.Context) error {
	if m.srv != nil {
		m.srv.Shutdown()
		m.srv.WaitForShutdown()
		m.srv = nil
	}
	return nil
}

// Close stops, in order and under ctx, whatever Open started and Run has
// not stopped: after a failed Open, or instead of Run.
func (m *Main) Close(ctx context.Context) error {
	if m.metrics != nil {
		_ = m.metrics.Close()
		m.metrics = nil
	}
	return errors.Join(m.stopWorker(ctx), m.stopState(ctx), m.stopConn(ctx), m.stopServer(ctx))
}

// shareOf returns a context that ends after share of ctx's remaining time.
func shareOf(ctx context.Context, share float64) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, time.Duration(float64(time.Until(deadline))*share))
}

// chanClosed reports whether c is closed.
func chanClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
