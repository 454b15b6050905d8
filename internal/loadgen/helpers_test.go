package loadgen_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/state"
)

// waitTimeout bounds every wait of the tests.
const waitTimeout = 10 * time.Second

// TestMain fails the package's tests if they leave goroutines behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startWorker starts an in-process worker with an in-memory store on its own
// connection to srv; Cleanup shuts it down.
func startWorker(tb testing.TB, srv *server.Server) {
	tb.Helper()
	nc := connect(tb, srv)
	w, err := consumer.New(nc, state.NewManager(state.Options{}), consumer.Config{})
	require.NoError(tb, err)
	require.NoError(tb, w.Start())
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		require.NoError(tb, w.Shutdown(ctx))
	})
}

// connect opens a connection to srv; Cleanup closes it.
func connect(tb testing.TB, srv *server.Server) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(srv.ClientURL(), nats.Timeout(waitTimeout))
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	return nc
}

// setup starts a server and a worker and returns a connection to them.
func setup(tb testing.TB) (*server.Server, *nats.Conn) {
	tb.Helper()
	srv := natstest.Start(tb, nil)
	startWorker(tb, srv)
	return srv, connect(tb, srv)
}

// testCtx returns a context bounded by waitTimeout, canceled at Cleanup.
func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	tb.Cleanup(cancel)
	return ctx
}
