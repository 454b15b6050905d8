package e2e

import (
	"net"
	"regexp"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// natsServer is a nats-server process listening on 127.0.0.1.
type natsServer struct {
	t    testing.TB
	port int
	args []string // extra command-line arguments
	URL  string
	p    *process
}

// serverReady is the line nats-server logs once it accepts clients.
var serverReady = regexp.MustCompile(`Server is ready`)

// startServer runs nats-server on a free port of 127.0.0.1, with extra
// arguments if any, and waits until a client can connect. Cleanup stops it.
func startServer(t testing.TB, args ...string) *natsServer {
	t.Helper()
	s := &natsServer{t: t, args: args}
	var lastErr string
	for range 3 {
		s.port = freePort(t)
		if s.launch() {
			break
		}
		lastErr = s.p.stderr.String()
		s.p = nil
	}
	require.NotNil(t, s.p, "nats-server did not start; last stderr:\n%s", lastErr)
	s.URL = "nats://127.0.0.1:" + strconv.Itoa(s.port)
	t.Cleanup(func() {
		if s.p != nil {
			s.p.terminate(stopTimeout)
		}
	})
	s.checkConnect()
	return s
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// launch starts the process on s.port and reports whether it became ready;
// if not (the port was taken), the process has exited or been killed.
func (s *natsServer) launch() bool {
	s.p = startProcess(s.t, "nats-server", bin.natsServer, nil,
		append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port)}, s.args...)...)
	if _, err := s.p.awaitStderr(serverReady, startTimeout); err != nil {
		s.p.terminate(stopTimeout)
		return false
	}
	return true
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
	if s.p != nil {
		s.p.terminate(stopTimeout)
	}
}

// Restart stops the server and starts it again on the same port.
func (s *natsServer) Restart() {
	s.t.Helper()
	s.Stop()
	var lastErr string
	for range 5 {
		if s.launch() {
			s.checkConnect()
			return
		}
		lastErr = s.p.stderr.String()
	}
	require.Failf(s.t, "restart failed", "nats-server did not restart on port %d; last stderr:\n%s", s.port, lastErr)
}
