package jetstream_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/kv/jetstream"
)

// A server whose JetStream failed answers every JetStream request
// "temporarily unavailable" while another server of the connection's pool
// serves: Open moves the connection to the other server after a few
// attempts, says so, and opens the bucket there, instead of exiting when
// its start-up bound ends.
func TestOpenMovesToAnotherServerWhenJetStreamKeepsFailingThroughOne(t *testing.T) {
	broken := failedJetStream(t)
	good := startJetStream(t)

	nc, err := nats.Connect(broken.ClientURL()+","+good.ClientURL(), nats.DontRandomize(),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	require.Equal(t, broken.ClientURL(), nc.ConnectedUrl())

	var moved atomic.Bool
	logger := slog.New(handlerFunc(func(r slog.Record) {
		if strings.HasPrefix(r.Message, "JetStream keeps failing through this NATS server: moving to another server") {
			moved.Store(true)
		}
	}))
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	st, err := jetstream.Open(ctx, nc, jetstream.Config{Bucket: "moved", Logger: logger, ProbeInterval: 50 * time.Millisecond})
	require.NoError(t, err, "the bucket opened through the other server")
	t.Cleanup(st.Close)
	assert.Equal(t, good.ClientURL(), nc.ConnectedUrl())
	assert.True(t, moved.Load(), "it said it moved")
	_, err = st.Put(t.Context(), "k", []byte("v"))
	require.NoError(t, err)
}

// With one server in its pool, Open stays on it and ends, as before, with
// the last reason JetStream gave.
func TestOpenWithOneServerStaysAndEndsWithTheReason(t *testing.T) {
	broken := failedJetStream(t)
	nc := connectTo(t, broken)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err := jetstream.Open(ctx, nc, jetstream.Config{Bucket: "stays", ProbeInterval: 50 * time.Millisecond})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "temporarily unavailable")
	assert.Equal(t, broken.ClientURL(), nc.ConnectedUrl())
}

// failedJetStream starts a server without JetStream whose JetStream API a
// responder answers as a server whose JetStream failed does: "temporarily
// unavailable", to every request.
func failedJetStream(t *testing.T) *server.Server {
	t.Helper()
	srv := natstest.Start(t, nil)
	answer := connectTo(t, srv)
	_, err := answer.Subscribe("$JS.API.>", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"type":"io.nats.jetstream.api.v1.error","error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`))
	})
	require.NoError(t, err)
	require.NoError(t, answer.Flush())
	return srv
}
