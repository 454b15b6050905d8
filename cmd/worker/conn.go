package main

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// connect dials NATS with the worker's policy: keep trying to connect, reconnect
// forever with jitter, buffer publishes while disconnected, and keep retrying
// on authentication errors (logged, not fatal). closed is closed when the
// connection is closed.
//
// closing tells the handlers that a disconnection is the worker's own doing;
// connect sets connected once the connection is up for the first time.
//
// fatal is called with an error that leaves the worker up but unable to
// consume: the server refusing its heartbeat subscription.
func connect(url string, c Config, log *slog.Logger, closing, connected *atomic.Bool, fatal func(error)) (nc *nats.Conn, closed <-chan struct{}, err error) {
	done := make(chan struct{})
	heartbeats := c.Prefix + ".heartbeat.*"
	var lastSlow atomic.Int64 // unix nanos of the last slow-consumer log line
	var once sync.Once
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
		nats.ConnectHandler(func(nc *nats.Conn) {
			connected.Store(true)
			resetLastErr()
			log.Info("NATS connected", slog.String("url", nc.ConnectedUrlRedacted()))
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if closing.Load() {
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
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			logOnce("NATS connect failed, retrying", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { once.Do(func() { close(done) }) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{slog.Any("err", err)}
			if sub != nil {
				attrs = append(attrs, slog.String("subject", sub.Subject))
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				// Reported on every drop while it lasts: log it every 10 s at most.
				now := time.Now().UnixNano()
				if last := lastSlow.Load(); now-last < int64(10*time.Second) || !lastSlow.CompareAndSwap(last, now) {
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
				fatal(err)
				return
			}
			logOnce("NATS error", err)
		}),
	}
	auth, err := authOptions(c)
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, auth...)
	nc, err = nats.Connect(strings.TrimSpace(url), opts...)
	if err != nil {
		return nil, nil, err
	}
	return nc, done, nil
}

// authOptions are the NATS options of c's credentials and TLS settings,
// shared by the worker and the subcommands.
func authOptions(c Config) ([]nats.Option, error) {
	var opts []nats.Option
	if c.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.NKeySeed != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeySeed)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts, nil
}
