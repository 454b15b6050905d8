package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"flowstate/kv"
)

// intakeShare is the share of the shutdown time given to the worker's drain
// of received reports; the rest is for the last publish, the connection and
// the embedded server.
const intakeShare = 0.6

// Close shuts down in order, under ctx: stop the metrics server if it never
// ran; stop intake and drain the reports received (those not applied within
// its share of ctx are dropped: their nodes' next heartbeats heal the state),
// publish the last state; hand the publisher lease over; drain the
// connection; stop the embedded server.
func (m *Main) Close(ctx context.Context) error {
	var errs []error
	if m.metrics != nil {
		_ = m.metrics.Close()
	}
	if m.nc != nil && !m.nc.IsConnected() && !chanClosed(m.nc.up) {
		// Never connected (the server refuses the credentials, or is not
		// there): nothing was received, and a drain would only wait for a
		// server until ctx ends. Close instead.
		m.nc.closing.Store(true)
		m.nc.Close()
	}
	dropped := false
	if m.worker != nil {
		wctx, cancel := shareOf(ctx, intakeShare)
		err := m.worker.Shutdown(wctx)
		cancel()
		switch {
		case err != nil && wctx.Err() != nil && ctx.Err() == nil:
			s := m.worker.Stats()
			m.Log.Warn("reports received but not applied in time are dropped; their nodes' next heartbeats heal the state",
				slog.Uint64("received", s.Received), slog.Uint64("applied", s.Applied), slog.Uint64("rejected", s.Rejected))
			dropped = true
		case err != nil:
			errs = append(errs, err)
		}
	}
	if m.mgr != nil {
		// Hands the publisher lease over to another worker at once.
		if err := m.mgr.StopFollowing(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if js, ok := m.store.(*kv.JetStream); ok {
		js.Close()
	}
	if m.nc != nil {
		m.nc.closing.Store(true)
		if err := m.closeConn(ctx, dropped); err != nil {
			errs = append(errs, err)
		}
	}
	if m.srv != nil {
		m.srv.Shutdown()
		m.srv.WaitForShutdown()
	}
	return errors.Join(errs...)
}

// closeConn drains the connection and waits until it is closed, under ctx.
// After an incomplete drain of the heartbeats (dropped), it flushes what was
// sent (acks, the last state) and closes, dropping what is still pending.
func (m *Main) closeConn(ctx context.Context, dropped bool) error {
	nc := m.nc
	if dropped {
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
