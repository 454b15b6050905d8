package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
)

// Shutdown stops the worker within ctx:
//
//  1. it stops intake at once: the heartbeat subscription is drained, so
//     the server sends no more reports;
//  2. it applies and acknowledges the reports already received, for at most
//     half of the time ctx leaves (all of them if ctx has no deadline); the
//     rest are dropped unanswered and counted (Stats.DroppedAtShutdown):
//     each node's next heartbeat heals the state;
//  3. it stops the eviction loop and the micro service (whose endpoints
//     drain), publishes the last state and cancels the handlers' context.
//
// The store's work in step 3 is bounded by ctx too. It returns an error if
// ctx ended before the reports could even be dropped. Calling it again does
// nothing.
func (w *Worker) Shutdown(ctx context.Context) error {
	if w.sub == nil || w.stopped.Swap(true) {
		return nil
	}
	stopPub := context.AfterFunc(ctx, w.pubCancel)
	defer stopPub()
	defer w.pubCancel()
	defer w.cancel()

	var errs []error
	if err := w.stopIntake(ctx); err != nil {
		errs = append(errs, err)
	}
	w.in.drain(ctx) // answers the reports still in flight
	w.evictor.stop()
	if err := w.svc.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stop service: %w", err))
	}
	w.publisher.stop() // publishes the last state
	w.log.Info("worker stopped", slog.Uint64("applied", w.stats.applied.Load()), slog.Uint64("rejected", w.stats.rejected.Load()),
		slog.Uint64("dropped_at_shutdown", w.stats.droppedAtStop.Load()))
	return errors.Join(errs...)
}

// stopIntake drains the heartbeat subscription: the reports received are
// applied until the apply budget is spent, then dropped.
func (w *Worker) stopIntake(ctx context.Context) error {
	closed := w.sub.StatusChanged(nats.SubscriptionClosed)
	if err := w.sub.Drain(); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil // nothing more can arrive
		}
		return fmt.Errorf("consumer: drain heartbeats: %w", err)
	}
	if !w.sub.IsValid() {
		return nil
	}
	budget, stop := halfBudget(ctx)
	defer stop()
	select {
	case <-closed:
		return nil
	case <-budget:
	case <-ctx.Done():
	}
	// Out of time to apply: drop what is left, and interrupt a report
	// stuck in the store.
	w.dropping.Store(true)
	w.cancel()
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		if n, _, err := w.sub.Pending(); err == nil {
			w.stats.droppedAtStop.Add(uint64(n))
		}
		_ = w.sub.Unsubscribe()
		return fmt.Errorf("consumer: drain heartbeats: %w", ctx.Err())
	}
}
