package jetstream_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/kv/jetstream"
)

// A server without JetStream fails Open at once, with a reason that says
// how to enable it, instead of the retries of an unavailable JetStream.
func TestOpenWithoutJetStreamSaysSo(t *testing.T) {
	nc := connectTo(t, natstest.Start(t, nil))
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	_, err := jetstream.Open(ctx, nc, jetstream.Config{Bucket: "b"})
	require.ErrorIs(t, err, jetstream.ErrNotEnabled)
	assert.NoError(t, ctx.Err(), "it did not wait for JetStream")
	assert.Contains(t, err.Error(), "has no JetStream: start nats-server with -js")
}

// unreachable returns a connection to a free loopback port with no server
// yet, that keeps trying, as the worker's store connection does.
func unreachable(t *testing.T) (*nats.Conn, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	nc, err := nats.Connect("nats://127.0.0.1:"+strconv.Itoa(port), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, port
}

// Open waits for a server that comes up after it began, and one that never
// does ends with the last reason JetStream gave, not only the deadline.
func TestOpenWaitsForJetStreamAndEndsWithTheLastReason(t *testing.T) {
	nc, _ := unreachable(t)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	_, err := jetstream.Open(ctx, nc, jetstream.Config{Bucket: "b"})
	require.ErrorIs(t, err, kv.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "JetStream not available in time (context deadline exceeded): not connected to NATS; the last reason: ")

	nc, port := unreachable(t)
	retrying := make(chan struct{}, 1)
	log := slog.New(handlerFunc(func(r slog.Record) {
		if r.Message == "JetStream not available yet, retrying" {
			select {
			case retrying <- struct{}{}:
			default:
			}
		}
	}))
	type result struct {
		st  *jetstream.Store
		err error
	}
	opened := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		st, err := jetstream.Open(ctx, nc, jetstream.Config{Bucket: "b", Logger: log})
		opened <- result{st, err}
	}()
	select {
	case <-retrying:
	case <-time.After(wait):
		require.FailNow(t, "Open did not retry")
	}
	natstest.Start(t, &server.Options{Port: port, JetStream: true, StoreDir: t.TempDir()})
	r := <-opened // bounded by Open's own wait
	require.NoError(t, r.err)
	r.st.Close()
}

// handlerFunc is a slog.Handler that calls f with every record.
type handlerFunc func(slog.Record)

func (f handlerFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (f handlerFunc) Handle(_ context.Context, r slog.Record) error { f(r); return nil }
func (f handlerFunc) WithAttrs([]slog.Attr) slog.Handler            { return f }
func (f handlerFunc) WithGroup(string) slog.Handler                 { return f }
