package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/internal/throttle"
)

// natsConn is a connection of the worker and what its handlers tell. As
// an actor of the group, Run supervises it and Stop closes it.
type natsConn struct {
	*nats.Conn
	closed  chan struct{} // closed when the connection is closed
	up      chan struct{} // closed once the connection is up for the first time
	fatal   chan error    // errors the worker cannot go on with
	closing atomic.Bool   // the worker is closing it: disconnections are its own doing
	// abandon makes Stop flush what was sent and close, rather than
	// drain: the worker dropped the reports still pending.
	abandon atomic.Bool
	// closeAtStop makes Stop close at once: the store's connection, whose
	// subscriptions are the store's and end with it.
	closeAtStop bool
	log         *slog.Logger
}

// Run fails when the connection closes without the worker closing it, or
// when the server refuses the heartbeat subscription: a worker that is up
// but cannot consume must not go on.
func (c *natsConn) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-c.closed:
		if c.closing.Load() {
			<-ctx.Done()
			return nil
		}
		return errors.New("NATS connection closed unexpectedly")
	case err := <-c.fatal:
		return fmt.Errorf("cannot consume: the NATS server refuses the heartbeat subscription; check the worker's permissions: %w", err)
	}
}

// Stop drains the connection and waits until it is closed, by ctx's
// deadline. After an incomplete drain of the heartbeats (abandon), it
// flushes what was sent (acks, the last state) within half the time left
// and closes, dropping what is still pending.
func (c *natsConn) Stop(ctx context.Context) error {
	if c.IsClosed() {
		return nil
	}
	c.closing.Store(true)
	if c.closeAtStop {
		c.Close()
		return nil
	}
	if c.abandon.Load() {
		fctx, cancel := shareOf(ctx, 0.5)
		defer cancel()
		if err := c.FlushWithContext(fctx); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			c.log.Warn("flush before close failed", slog.Any("err", err))
		}
		c.Close()
		return nil
	}
	if err := c.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		c.Close()
	}
	select {
	case <-c.closed:
		return nil
	case <-ctx.Done():
		c.Close()
		return fmt.Errorf("NATS drain: %w", ctx.Err())
	}
}

// storeConnOptions make the JetStream store's own connection: a write
// buffered while the connection is down would be sent once it is back,
// after the report it carries was answered 503, and could then be stored
// after a later report of the same node. With no reconnect buffer, a write
// is sent now or fails now.
var storeConnOptions = []nats.Option{nats.Name("flowstate-worker-store"), nats.ReconnectBufSize(-1)}

// The worker's pings: a link that stops answering (stalled, or a server
// that hangs) is found stale after clientPingsOut unanswered pings
// clientPingInterval apart, within 12 s, and the connection is replaced;
// meanwhile /readyz answers 503. nats.go's default is 2 minutes.
const (
	clientPingInterval = 4 * time.Second
	clientPingsOut     = 2
)

// connect dials NATS with the worker's policy: keep trying to connect, reconnect
// forever with jitter, buffer publishes while disconnected, ping often enough
// to find a stalled link, and keep retrying on authentication errors (logged,
// not fatal). With srv, the connection is
// in-process. The credentials' options are auth, checked beforehand.
//
// fatal gets an error that leaves the worker up but unable to consume: the
// server refusing its heartbeat subscription. extra options come last, and
// so override the policy's.
func connect(url string, srv nats.InProcessConnProvider, auth []nats.Option, prefix string, log *slog.Logger, extra ...nats.Option) (*natsConn, error) {
	c := &natsConn{closed: make(chan struct{}), up: make(chan struct{}), fatal: make(chan error, 1), log: log}
	heartbeats := prefix + ".heartbeat.*"
	slow := throttle.New(1, 10*time.Second) // slow-consumer log lines
	var closeOnce, upOnce sync.Once
	markUp := func() { upOnce.Do(func() { close(c.up) }) }
	var lastErr struct {
		sync.Mutex
		s string
	}
	// logOnce logs an error once until it changes, so that a server that
	// keeps refusing the worker's credentials gives one line, not one per retry.
	logOnce := func(msg string, err error) {
		lastErr.Lock()
		defer lastErr.Unlock()
		if err.Error() == lastErr.s {
			return
		}
		lastErr.s = err.Error()
		log.Error(msg, slog.Any("err", err))
	}
	// resetLastErr starts over once connected: the next error is news.
	resetLastErr := func() {
		lastErr.Lock()
		lastErr.s = ""
		lastErr.Unlock()
	}
	opts := []nats.Option{
		nats.Name("flowstate-worker"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.ReconnectBufSize(64 << 20),
		nats.IgnoreAuthErrorAbort(),
		nats.DrainTimeout(4 * time.Second),
		nats.PingInterval(clientPingInterval),
		nats.MaxPingsOutstanding(clientPingsOut),
		nats.ConnectHandler(func(nc *nats.Conn) {
			resetLastErr()
			log.Info("NATS connected", slog.String("url", nc.ConnectedUrlRedacted()))
			markUp()
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if c.closing.Load() {
				return
			}
			if err != nil {
				// An event, not a state: logged as such, so that it does
				// not end a run of the same error around it.
				log.Error("NATS disconnected", slog.Any("err", err))
			} else {
				log.Warn("NATS disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			resetLastErr()
			log.Info("NATS reconnected", slog.String("url", nc.ConnectedUrlRedacted()))
			markUp()
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			logOnce("NATS connect failed, retrying", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { closeOnce.Do(func() { close(c.closed) }) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{slog.Any("err", err)}
			if sub != nil {
				attrs = append(attrs, slog.String("subject", sub.Subject))
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				// Reported on every drop while it lasts: log it every 10 s at most.
				if ok, _ := slow.Allow(); !ok {
					return
				}
				if sub != nil {
					if n, err := sub.Dropped(); err == nil {
						attrs = append(attrs, slog.Int("dropped_total", n))
					}
				}
				log.Warn("slow consumer: the client library dropped messages; the next report of each node heals the state", attrs...)
				return
			}
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `Subscription to "`+heartbeats+`"`) {
				// Up but deaf is the worst state: give up loudly instead.
				select {
				case c.fatal <- err:
				default:
				}
				return
			}
			logOnce("NATS error", err)
		}),
	}
	if srv != nil {
		opts = append(opts, nats.InProcessServer(srv))
	}
	opts = append(opts, auth...)
	opts = append(opts, extra...)
	nc, err := nats.Connect(strings.TrimSpace(url), opts...)
	if err != nil {
		return nil, err
	}
	c.Conn = nc
	if nc.IsConnected() {
		markUp()
	}
	return c, nil
}
