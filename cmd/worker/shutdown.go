package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/flowstate-io/flowstate/consumer"
)

// The parts are the actors of one group (group.go), each added as Open
// starts it, and stop in the reverse order, by one deadline
// (shutdownTimeout after a signal or a failure): the signals, the metrics
// server, the prefix watch; the worker (intake stops, the reports received
// are applied and acked for intakeShare of the time left, the rest are
// dropped, their nodes' next heartbeats heal the state; then the last
// publish); the shared state (the publisher lease handed over, the store
// closed) and its connection; the connection (drained); the embedded
// server. Close is that stop, after Run as after a failed Open.

// intakeShare is the share of the time left given to the worker's drain of
// received reports; the rest is for the last publish, the connection and
// the embedded server.
const intakeShare = 0.6

// workerPart is the worker (package consumer) as an actor: Run logs
// "serving" once the connection is up, and Stop shuts the worker down.
type workerPart struct {
	w       *consumer.Worker
	nc      *natsConn
	state   consumer.State
	log     *slog.Logger
	serving []any // the attributes of the serving line
}

// Run logs "serving" once the connection is up, then waits for the stop:
// the worker itself runs on the connection's goroutines.
func (p workerPart) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-p.nc.up:
	}
	v, _ := p.state.Version(ctx)
	p.log.Info("serving", append(p.serving, slog.String("epoch", v.Epoch))...)
	<-ctx.Done()
	return nil
}

// Stop stops intake, drains the reports received and publishes the last
// state. Reports not applied within intakeShare of the time left are
// dropped, and the connection then flushed and closed, not drained.
func (p workerPart) Stop(ctx context.Context) error {
	if !p.nc.IsConnected() && !chanClosed(p.nc.up) {
		// Never connected (the server refuses the credentials, or is not
		// there): nothing was received, and a drain would only wait for a
		// server until ctx ends. Close instead.
		p.nc.closing.Store(true)
		p.nc.Close()
	}
	wctx, cancel := shareOf(ctx, intakeShare)
	defer cancel()
	err := p.w.Shutdown(wctx)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		s := p.w.Stats()
		p.log.Warn("reports received but not applied in time are dropped; their nodes' next heartbeats heal the state",
			slog.Uint64("received", s.Received), slog.Uint64("applied", s.Applied), slog.Uint64("rejected", s.Rejected))
		p.nc.abandon.Store(true)
		return nil
	}
	return err
}

// Close stops every part that Open and Run started, in the reverse order
// of their start, by ctx's deadline: the one stop path, after Run as after
// a failed Open. A second Close does nothing.
func (m *Main) Close(ctx context.Context) error {
	return m.group.stop(ctx)
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
