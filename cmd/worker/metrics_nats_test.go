package main

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/internal/wait"
)

// A server drops a client as a slow consumer without a word: the client
// sees io.EOF. The embedded server knows why, and the worker counts it.
func TestNATSEventsCountTheServerDroppingTheWorkerAsASlowConsumer(t *testing.T) {
	srv := natstest.Start(t, &server.Options{MaxPending: 1024, MaxPayload: 1024})
	nc, events, disconnected := watchedConn(t, srv)
	_, err := nc.Subscribe("big", func(*nats.Msg) {})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	pub, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	// One message that, with its MSG line, passes the subscriber's max_pending.
	require.NoError(t, pub.Publish("big", bytes.Repeat([]byte("x"), 1024)))
	require.NoError(t, pub.Flush())

	select {
	case err := <-disconnected:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber was not dropped")
	}
	// The server records the close reason asynchronously.
	wait.Until(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		byCause, slow := events.counts()
		return slow == 1, fmt.Sprintf("slow-consumer drop not counted: %v", byCause)
	})
	byCause, _ := events.counts()
	assert.Equal(t, uint64(1), byCause[causeServerClosed], "seen by the client as io.EOF")
}

func TestNATSEventsCountAServerThatStopsAsADisconnectionOnly(t *testing.T) {
	srv := natstest.Start(t, nil)
	_, events, disconnected := watchedConn(t, srv)
	srv.Shutdown()
	select {
	case <-disconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("no disconnection")
	}
	byCause, slow := events.counts()
	assert.Equal(t, uint64(1), byCause[causeServerClosed]+byCause[causeOther])
	assert.Zero(t, slow)
}

// watchedConn connects to srv with natsEvents watching, and a channel that
// receives the error of its first disconnection.
func watchedConn(tb testing.TB, srv *server.Server) (*nats.Conn, *natsEvents, <-chan error) {
	tb.Helper()
	disconnected := make(chan error, 1)
	nc, err := nats.Connect(srv.ClientURL(),
		nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			select {
			case disconnected <- err:
			default:
			}
		}))
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	return nc, watchNATS(nc, srv), disconnected
}
