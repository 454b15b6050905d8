package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/flowstate-io/flowstate/internal/throttle"
)

// embeddedMaxPayload is the max payload of the embedded server.
const embeddedMaxPayload = 8 << 20

// embeddedStartTimeout bounds the wait for the embedded server to listen.
const embeddedStartTimeout = 10 * time.Second

// The embedded server's liveness settings, those docs/operating.md gives for an
// external server: a client that stops answering pings (a stalled link, a
// paused process) is closed after serverPingMax unanswered pings
// serverPingInterval apart, within about 20 s, and one whose socket takes
// no bytes for serverWriteDeadline too, so that a deaf worker's
// subscription leaves the queue group and its share of the reports goes
// to the other workers.
const (
	serverPingInterval  = 5 * time.Second
	serverPingMax       = 2
	serverWriteDeadline = 10 * time.Second
)

// startEmbedded starts an in-process NATS server listening on listen
// (host:port; port 0 picks a free port), logging through log, and waits
// until it takes connections. A port already taken fails at once.
func startEmbedded(listen string, log *slog.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, err
	}
	if port == 0 {
		port = server.RANDOM_PORT // the server's "any free port"; its 0 means 4222
	} else {
		// The server would only log the failure and never be ready: try the
		// address first, to fail at once with it.
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			there := net.JoinHostPort(cmp.Or(host, "127.0.0.1"), portStr)
			return nil, fmt.Errorf("embedded NATS server: cannot listen on %s: %w; give --listen 127.0.0.1:0 for any free port, or --nats-url nats://%s to use the NATS server there", listen, err, there)
		}
		ln.Close()
	}
	if host == "" {
		host = "0.0.0.0"
	}
	s, err := server.NewServer(&server.Options{
		Host:   host,
		Port:   port,
		NoSigs: true, // the worker handles signals and drains first
		// The aggregate grows by about 32 bytes a flow (JSON: 70); 8 MiB
		// holds some 100,000 flows where NATS's default 1 MiB stops near
		// 30,000. An external server's max_payload is its operator's.
		MaxPayload:    embeddedMaxPayload,
		PingInterval:  serverPingInterval,
		MaxPingsOut:   serverPingMax,
		WriteDeadline: serverWriteDeadline,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	l := newServerLog(log)
	s.SetLogger(l, false, false)
	go s.Start()
	if !s.ReadyForConnections(embeddedStartTimeout) {
		s.Shutdown()
		if msg := l.fatalMessage(); msg != "" {
			return nil, fmt.Errorf("embedded NATS server on %s: %s", listen, msg)
		}
		return nil, fmt.Errorf("embedded NATS server did not listen on %s within %v", listen, embeddedStartTimeout)
	}
	return s, nil
}

// embeddedServer is the embedded NATS server as an actor of the group: the
// last part to stop.
type embeddedServer struct{ *server.Server }

// Run fails if the server shuts down before ctx ends: the worker would be
// up with nothing to consume from.
func (s embeddedServer) Run(ctx context.Context) error {
	down := make(chan struct{})
	go func() {
		s.WaitForShutdown()
		close(down)
	}()
	select {
	case <-ctx.Done():
		return nil
	case <-down:
		return errors.New("the embedded NATS server shut down")
	}
}

// Stop shuts the server down and waits until it has.
func (s embeddedServer) Stop(context.Context) error {
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

// serverLog is the embedded server's logger: its warnings and errors (slow
// consumers, payload violations, ...) go to the worker's log, at most
// serverLogBurst lines a second; its notices are debug lines, except slow
// consumers, which are warnings.
type serverLog struct {
	log      *slog.Logger
	throttle *throttle.Throttle // serverLogBurst lines a second

	mu    sync.Mutex // guards fatal
	fatal string     // the last fatal message
}

// serverLogBurst is the most lines the embedded server logs a second.
const serverLogBurst = 10

var _ server.Logger = (*serverLog)(nil)

func newServerLog(log *slog.Logger) *serverLog {
	return &serverLog{log: log.With(slog.String("component", "nats-server")), throttle: throttle.New(serverLogBurst, time.Second)}
}

func (l *serverLog) Noticef(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "Slow Consumer") {
		l.emit(slog.LevelWarn, msg)
		return
	}
	l.log.Debug(msg)
}

func (l *serverLog) Warnf(format string, v ...any) { l.emit(slog.LevelWarn, fmt.Sprintf(format, v...)) }
func (l *serverLog) Errorf(format string, v ...any) {
	l.emit(slog.LevelError, fmt.Sprintf(format, v...))
}
func (l *serverLog) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Tracef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }

// Fatalf logs an error and records it; it does not exit, as the server's
// own logger would: the worker decides.
func (l *serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	l.fatal = msg
	l.mu.Unlock()
	l.log.Error(msg)
}

func (l *serverLog) fatalMessage() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}

// emit logs msg unless this second's budget is spent; the next line logged
// says how many were held back.
func (l *serverLog) emit(level slog.Level, msg string) {
	ok, suppressed := l.throttle.Allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		l.log.Log(context.Background(), level, msg, slog.Int("suppressed", suppressed))
		return
	}
	l.log.Log(context.Background(), level, msg)
}
