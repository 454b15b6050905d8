package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/state"
)

// cliWait bounds every wait of the subcommand tests.
const cliWait = 10 * time.Second

// startTestServer starts an embedded NATS server on a free port of
// 127.0.0.1; Cleanup stops it.
func startTestServer(tb testing.TB) *server.Server {
	tb.Helper()
	return natstest.Start(tb, nil)
}

// startTestWorker runs an in-process worker with a new in-memory store on
// its own connection to srv; Cleanup stops it.
func startTestWorker(tb testing.TB, srv *server.Server, cfg consumer.Config) {
	tb.Helper()
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("test-worker"))
	require.NoError(tb, err)
	w, err := consumer.New(nc, state.NewManager(state.Options{}), cfg)
	require.NoError(tb, err)
	require.NoError(tb, w.Start())
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cliWait)
		defer cancel()
		require.NoError(tb, w.Shutdown(ctx))
		nc.Close()
	})
}

// testClient connects a client of the worker on srv with prefix.
func testClient(tb testing.TB, srv *server.Server, prefix string) *client.Client {
	tb.Helper()
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("test-client"))
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	c, err := client.New(nc, client.Options{Prefix: prefix})
	require.NoError(tb, err)
	return c
}

// bounded returns a context that ends after cliWait or at Cleanup.
func bounded(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	tb.Cleanup(cancel)
	return ctx
}

// noEnv is a getenv with nothing set.
func noEnv(string) string { return "" }

// runCLI runs the binary's run in-process and returns its exit status and
// output.
func runCLI(tb testing.TB, getenv func(string) string, args ...string) (code int, stdout, stderr string) {
	tb.Helper()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(args, getenv, &out, &errOut) }()
	select {
	case code = <-done:
	case <-time.After(3 * cliWait):
		require.FailNow(tb, "command did not return", "%v", args)
	}
	return code, out.String(), errOut.String()
}

// lineWriter hands over each complete line written to it.
type lineWriter struct {
	mu    sync.Mutex // guards buf
	buf   bytes.Buffer
	lines chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 1000)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.Reset()
			w.buf.WriteString(line) // incomplete: keep it
			return len(p), nil
		}
		w.lines <- strings.TrimSuffix(line, "\n")
	}
}

// next returns the next line, failing after cliWait.
func (w *lineWriter) next(tb testing.TB) string {
	tb.Helper()
	select {
	case line := <-w.lines:
		return line
	case <-time.After(cliWait):
		require.FailNow(tb, "no line written")
		return ""
	}
}

// singleGet sends the single-message (v1) get on subject, asking for
// accept when it is set, and returns the reply: what a client that predates
// chunked gets receives.
func singleGet(tb testing.TB, srv *server.Server, subject, accept string) *nats.Msg {
	tb.Helper()
	req := nats.NewMsg(subject)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	return natstest.Request(tb, srv, req, cliWait)
}
