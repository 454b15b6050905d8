package e2e

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/proctest"
)

// natsServer is a nats-server process listening on 127.0.0.1.
type natsServer struct {
	t    testing.TB
	port int
	args []string // extra command-line arguments
	URL  string
	p    *process // the latest run
	srv  *proctest.Server
}

// serverReady is the line nats-server logs once it accepts clients.
var serverReady = proctest.ServerReady

// startServer runs nats-server on a free port of 127.0.0.1, with extra
// arguments if any, and waits until a client can connect. Cleanup stops it.
func startServer(t testing.TB, args ...string) *natsServer {
	t.Helper()
	srv, err := proctest.StartServer(proctest.ServerSpec{Path: bin.natsServer, Args: args, SeparateStdout: true})
	require.NoError(t, err)
	s := serverOf(t, srv, args)
	t.Cleanup(func() { s.p.terminate(stopTimeout) })
	s.checkConnect()
	return s
}

func serverOf(t testing.TB, srv *proctest.Server, args []string) *natsServer {
	return &natsServer{t: t, port: srv.Port, args: args, URL: srv.URL, p: wrapProcess(srv.Process), srv: srv}
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := proctest.FreePort()
	require.NoError(t, err)
	return port
}

// checkConnect fails the test unless a client can connect.
func (s *natsServer) checkConnect() {
	s.t.Helper()
	nc, err := nats.Connect(s.URL, nats.Timeout(startTimeout), nats.NoReconnect())
	require.NoError(s.t, err, "connect to nats-server at %s", s.URL)
	nc.Close()
}

// Stop stops the server with SIGTERM (SIGKILL after a bound).
func (s *natsServer) Stop() {
	s.t.Helper()
	s.p.terminate(stopTimeout)
}

// Restart stops the server and starts it again on the same port.
func (s *natsServer) Restart() {
	s.t.Helper()
	s.Stop()
	require.NoError(s.t, s.srv.Restart())
	s.p = wrapProcess(s.srv.Process)
	s.checkConnect()
}
