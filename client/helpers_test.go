package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/state"
)

// waitTimeout bounds every wait of the tests.
const waitTimeout = 10 * time.Second

// runServer starts an embedded NATS server on a free port of 127.0.0.1.
func runServer() (*server.Server, error) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		return nil, err
	}
	go srv.Start()
	if !srv.ReadyForConnections(waitTimeout) {
		srv.Shutdown()
		return nil, errors.New("embedded NATS server not ready")
	}
	return srv, nil
}

// runWorker starts an in-process worker with a new in-memory store, on its
// own connection to url. stop shuts it down and closes its connection.
func runWorker(url string, cfg consumer.Config) (stop func() error, err error) {
	nc, err := nats.Connect(url, nats.Name("test-worker"))
	if err != nil {
		return nil, err
	}
	w, err := consumer.New(nc, state.NewManager(state.Options{}), cfg)
	if err == nil {
		err = w.Start()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		err := w.Shutdown(ctx)
		nc.Close()
		return err
	}, nil
}

// startServer is runServer for tests; Cleanup stops the server.
func startServer(tb testing.TB) *server.Server {
	tb.Helper()
	srv, err := runServer()
	require.NoError(tb, err)
	tb.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv
}

// startWorker is runWorker for tests. It returns a stop function that is
// also registered with Cleanup; calling it twice is harmless.
func startWorker(tb testing.TB, srv *server.Server, cfg consumer.Config) (stop func()) {
	tb.Helper()
	stopWorker, err := runWorker(srv.ClientURL(), cfg)
	require.NoError(tb, err)
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			require.NoError(tb, stopWorker())
		}
	}
	tb.Cleanup(stop)
	return stop
}

// connect opens a client connection; Cleanup closes it.
func connect(tb testing.TB, srv *server.Server) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("test-client"), nats.Timeout(waitTimeout))
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	return nc
}

// newClient connects a Client with opts to srv.
func newClient(tb testing.TB, srv *server.Server, opts client.Options) *client.Client {
	tb.Helper()
	c, err := client.New(connect(tb, srv), opts)
	require.NoError(tb, err)
	return c
}

// testCtx returns a context bounded by waitTimeout, canceled at Cleanup.
func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	tb.Cleanup(cancel)
	return ctx
}

// report returns a report of node with flows ids, each with the given size,
// last execution time at and start time at-1000.
func report(node uint64, size uint64, at int64, ids ...flowstate.FlowID) client.Report {
	v := flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{},
		LastExecTimeMap: map[flowstate.FlowID]int64{},
		StartTimeMap:    map[flowstate.FlowID]int64{},
	}
	for _, id := range ids {
		v.StateSize[id] = size
		v.LastExecTimeMap[id] = at
		v.StartTimeMap[id] = at - 1000
	}
	return client.Report{NodeID: node, Value: v}
}

// mustSend sends r with an acknowledgement and returns the version.
func mustSend(tb testing.TB, c *client.Client, r client.Report) flowstate.Version {
	tb.Helper()
	v, err := c.Send(testCtx(tb), r)
	require.NoError(tb, err, "send report of node %d", r.NodeID)
	return v
}

// describe is a State in one line, for failure messages.
func describe(s client.State) string {
	return fmt.Sprintf("%s/%d (%d flows, epoch changed %v)", s.Epoch, s.Revision, len(s.Value.StateSize), s.EpochChanged)
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
	return natstest.Request(tb, srv, req, waitTimeout)
}
