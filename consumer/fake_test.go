package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// fakeState is a Manager whose methods a test may replace, to make the
// state refuse, block or count.
type fakeState struct {
	consumer.Local
	merge     func(ctx context.Context, nodeID uint64, flows []flowstate.Flow) (state.MergeResult, error)
	version   func(ctx context.Context) (flowstate.Version, error)
	size      func() (nodes, flows int)
	nodeCalls atomic.Int64
}

func newFakeState() *fakeState {
	return &fakeState{Local: state.NewManager(state.Options{})}
}

func (s *fakeState) Merge(ctx context.Context, rep state.Report) (state.MergeResult, error) {
	if s.merge != nil {
		return s.merge(ctx, rep.Node, rep.Flows)
	}
	return s.Local.Merge(ctx, rep)
}

func (s *fakeState) Version(ctx context.Context) (flowstate.Version, error) {
	if s.version != nil {
		return s.version(ctx)
	}
	return s.Local.Version(ctx)
}

func (s *fakeState) Size() (nodes, flows int) {
	if s.size != nil {
		return s.size()
	}
	return s.Local.Size()
}

func (s *fakeState) Nodes(ctx context.Context) ([]state.NodeInfo, flowstate.Version, error) {
	s.nodeCalls.Add(1)
	return s.Local.Nodes(ctx)
}

// startWorkerOn runs a worker serving local with cfg on srv; Cleanup shuts
// it down.
func startWorkerOn(tb testing.TB, srv *server.Server, local consumer.Local, cfg consumer.Config) *fixture {
	tb.Helper()
	wc := connect(tb, srv)
	w, err := consumer.New(wc, local, cfg)
	require.NoError(tb, err)
	return started(tb, srv, wc, w)
}

// startSharedOn runs a worker serving shared with cfg on srv; Cleanup shuts
// it down.
func startSharedOn(tb testing.TB, srv *server.Server, shared consumer.Shared, cfg consumer.Config) *fixture {
	tb.Helper()
	wc := connect(tb, srv)
	w, err := consumer.NewShared(wc, shared, cfg)
	require.NoError(tb, err)
	return started(tb, srv, wc, w)
}

// started starts w on its connection wc; Cleanup shuts it down.
func started(tb testing.TB, srv *server.Server, wc *nats.Conn, w *consumer.Worker) *fixture {
	tb.Helper()
	require.NoError(tb, w.Start())
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		require.NoError(tb, w.Shutdown(ctx))
	})
	return &fixture{srv: srv, nc: connect(tb, srv), wc: wc, worker: w}
}

// logSink collects a logger's lines as JSON objects.
type logSink struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{} // closed, and replaced, by every write
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote != nil {
		close(l.wrote)
	}
	l.wrote = make(chan struct{})
	return l.buf.Write(p)
}

// waitLines returns the lines whose message is msg once there are at least
// n: a worker answers a request before it logs what happened.
func (l *logSink) waitLines(tb testing.TB, msg string, n int) []map[string]any {
	tb.Helper()
	deadline := time.After(5 * time.Second)
	for {
		l.mu.Lock()
		if l.wrote == nil {
			l.wrote = make(chan struct{})
		}
		wrote := l.wrote
		l.mu.Unlock()
		if lines := l.lines(tb, msg); len(lines) >= n {
			return lines
		}
		select {
		case <-wrote:
		case <-deadline:
			tb.Fatalf("fewer than %d %q lines logged within 5 s", n, msg)
		}
	}
}

func (l *logSink) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// lines returns the lines whose message is msg.
func (l *logSink) lines(tb testing.TB, msg string) []map[string]any {
	tb.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(l.buf.String()) {
		var m map[string]any
		require.NoError(tb, json.Unmarshal([]byte(line), &m))
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
