package consumer

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// coalescer turns a stream of "the aggregate changed" signals into calls of
// publish: at once after a quiet interval, then at most once per interval,
// and always once after the last change. Its run is the publisher loop.
type coalescer struct {
	interval time.Duration
	clock    clock.Clock // the intervals' and the timers'
	publish  func()
	kick     chan struct{}      // a change is pending (the worker's own signal); capacity 1
	changes  <-chan struct{}    // a shared state's signal of its changes (follow); nil otherwise
	later    chan time.Duration // a publish asked for after a while (after); capacity 1
}

func newCoalescer(interval time.Duration, clk clock.Clock, publish func()) *coalescer {
	return &coalescer{
		interval: interval,
		clock:    clk,
		publish:  publish,
		kick:     make(chan struct{}, 1),
		later:    make(chan time.Duration, 1),
	}
}

// follow makes run hear of a shared state's changes from changes, the
// state's own signal (a non-blocking send on a channel of capacity 1): the
// state tells the publisher of every change it serves, this worker's
// reports included. Call it before run.
func (c *coalescer) follow(changes <-chan struct{}) { c.changes = changes }

// signal marks a publish pending without ever publishing on the caller's
// goroutine; run publishes it.
func (c *coalescer) signal() {
	select {
	case c.kick <- struct{}{}:
	default: // a change is already pending
	}
}

// after makes run publish once d has passed, as if a change came then,
// unless a publish asked for by after is pending already: the full
// updates' cadence (full.go). It never blocks.
func (c *coalescer) after(d time.Duration) {
	select {
	case c.later <- d:
	default: // asked for already
	}
}

// take reports whether a change is pending, of either signal, and takes
// it.
func (c *coalescer) take() bool {
	pending := false
	select {
	case <-c.kick:
		pending = true
	default:
	}
	select {
	case <-c.changes:
		pending = true
	default:
	}
	return pending
}

// changed signals a change. With interval 0 it publishes before it returns.
func (c *coalescer) changed() {
	if c.interval <= 0 {
		c.publish()
		return
	}
	c.signal()
}

// run publishes until ctx ends; it then publishes a pending change and
// returns.
func (c *coalescer) run(ctx context.Context) {
	timer := c.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	later := c.clock.NewTimer(time.Hour) // a publish asked for by after
	later.Stop()
	defer later.Stop()
	var last time.Time // of the last publish, by the clock; zero is long ago
	armed := false     // a trailing publish is scheduled
	laterArmed := false
	for {
		// While a publish is scheduled, kick is left alone: a change finds
		// it full and returns without waking this goroutine (one wakeup per
		// report under load otherwise). The scheduled publish takes it.
		kick, changes := c.kick, c.changes
		if armed {
			kick, changes = nil, nil
		}
		select {
		case <-kick:
		case <-changes:
		case d := <-c.later:
			if !laterArmed {
				later.Reset(d)
				laterArmed = true
			}
			continue
		case <-later.C():
			laterArmed = false
			c.signal()
			continue
		case <-timer.C():
			armed = false
			c.take() // a change since the timer was set: this publish has it
			c.publish()
			last = c.clock.Now()
			continue
		case <-ctx.Done():
			if armed || c.take() {
				c.publish()
			}
			return
		}
		if wait := untilNext(c.clock, last, c.interval); wait > 0 {
			timer.Reset(wait)
			armed = true
			continue
		}
		c.publish()
		last = c.clock.Now()
	}
}

// publishState writes the aggregate key and publishes the aggregate on
// <prefix>.state and what changed on <prefix>.state.delta (as
// Config.StateUpdates says), unless that version was already published.
func (w *Worker) publishState() {
	w.pubMu.Lock()
	defer w.pubMu.Unlock()
	ctx := w.pubCtx
	if err := w.in.flush(ctx); errors.Is(err, state.ErrNotPublisher) {
		// Another worker of the shared store publishes; when this one
		// publishes again, its first delta makes clients resync.
		w.v2.notPublisher = true
		return
	} else if err != nil {
		w.logThrottled(slog.LevelError, "aggregate key write failed", slog.Any("err", err))
	}
	if w.cfg.StateUpdates != StateUpdatesFull {
		w.publishDeltaLocked(ctx)
	}
	if w.cfg.StateUpdates == StateUpdatesDelta {
		return
	}
	if !w.fullDueLocked(ctx) {
		return
	}
	err := w.withEncoded(ctx, false, func(body []byte, v flowstate.Version) error {
		if v == w.lastPublished {
			return nil
		}
		h := versionHeader(v)
		h.Set(protocol.HeaderContentType, protocol.ContentTypeMsgpack)
		if err := w.nc.PublishMsg(&nats.Msg{Subject: w.stateSubject, Header: h, Data: body}); err != nil {
			return err
		}
		w.lastPublished = v
		w.fullPublishedLocked()
		w.stats.published.Add(1)
		return nil
	})
	if err != nil {
		w.stats.publishErrors.Add(1)
		attrs := []any{slog.String("subject", w.stateSubject), slog.Any("err", err)}
		if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, errTooLarge) {
			attrs = append(attrs, slog.Int64("max_payload", w.nc.MaxPayload()))
		}
		w.logThrottled(slog.LevelError, "state update not published", attrs...)
	}
}

// encoding is the aggregate of one version, encoded on demand.
// Its buffers are reused from one version to the next.
type encoding struct {
	valid      bool
	version    flowstate.Version
	flows      []flowstate.Flow
	msgpack    []byte
	hasMsgpack bool // msgpack holds this version
	json       []byte
	hasJSON    bool // json holds this version
	// chunks are the msgpack chunks of this version for a chunked get, nil
	// until asked for; never reused, so that they can be sent after the
	// cache's lock is released.
	chunks      [][]byte
	chunkBudget int64 // the body budget chunks were split for
}
