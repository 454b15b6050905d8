package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Ready bounds how long Start waits for the server to take connections.
const Ready = 10 * time.Second

// Start runs an embedded NATS server with opts (nil: defaults) and registers
// its shutdown with tb.Cleanup. Port 0 means a free port.
func Start(tb testing.TB, opts *server.Options) *server.Server {
	tb.Helper()
	o := server.Options{}
	if opts != nil {
		o = *opts
	}
	o.Host, o.NoSigs, o.NoLog = "127.0.0.1", true, true
	if o.Port == 0 {
		o.Port = server.RANDOM_PORT
	}
	if o.JetStream && o.StoreDir == "" {
		o.StoreDir = tb.TempDir()
	}
	s, err := server.NewServer(&o)
	if err != nil {
		tb.Fatalf("embedded NATS server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(Ready) {
		s.Shutdown()
		tb.Fatalf("embedded NATS server not ready within %v", Ready)
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Request sends req to srv as a request over a connection of its own,
// closed before it returns, and returns the reply: for a test that needs one
// exchange on the wire, as a client the project's packages do not model
// would make it. It fails tb without a reply within within.
func Request(tb testing.TB, srv *server.Server, req *nats.Msg, within time.Duration) *nats.Msg {
	tb.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		tb.Fatalf("connect to %s: %v", srv.ClientURL(), err)
	}
	defer nc.Close()
	reply, err := nc.RequestMsg(req, within)
	if err != nil {
		tb.Fatalf("request on %s: %v", req.Subject, err)
	}
	return reply
}
