package main

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/state"
)

// A worker of a shared store that stops hands the publisher lease over:
// the lease key, which holds its id while it publishes, is deleted by its
// stop, so that another worker takes over at once.
func TestStopHandsThePublisherLeaseOver(t *testing.T) {
	srv := natstest.Start(t, &server.Options{JetStream: true})
	m, stop := startMain(t, "--nats-url", srv.ClientURL(), "--kv", "jetstream", "--kv-bucket", "lease_test", "--log-level", "error")

	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bucket, err := js.KeyValue(ctx, "lease_test")
	require.NoError(t, err)
	w, err := bucket.Watch(ctx, state.PublisherKey)
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()

	holds := false
	for !holds {
		select {
		case e := <-w.Updates():
			holds = e != nil && e.Operation() == jetstream.KeyValuePut && string(e.Value()) == m.id
		case <-ctx.Done():
			t.Fatal("the worker never held the publisher lease")
		}
	}
	stop()
	for released := false; !released; {
		select {
		case e := <-w.Updates():
			released = e != nil && e.Operation() != jetstream.KeyValuePut
		case <-ctx.Done():
			t.Fatal("the stop did not release the publisher lease")
		}
	}
}

// An Open that fails after the connection and the worker are up (a taken
// metrics port) is undone by Close, the same stop as after Run: the
// worker is shut down and the connection drained and closed.
func TestCloseAfterAFailedOpenStopsWhatItStarted(t *testing.T) {
	srv := natstest.Start(t, nil)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()

	m := &Main{}
	require.NoError(t, m.ParseFlags([]string{"--nats-url", srv.ClientURL(), "--metrics-addr", taken.Addr().String()}, noEnv, io.Discard, io.Discard))
	require.ErrorContains(t, m.Open(), "--metrics-addr")
	w := m.workerRef.Load()
	require.NotNil(t, w, "the worker started before the failure")
	require.NoError(t, w.Ready())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.Close(ctx))
	assert.EqualError(t, w.Ready(), "shut down")
	assert.True(t, m.nc.IsClosed(), "the connection is closed")
	assert.NoError(t, m.Close(ctx), "a second Close does nothing")
}
