package consumer_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every wait of these tests.
const wait = 10 * time.Second

// startServer runs an embedded NATS server on a free loopback port.
func startServer(tb testing.TB, opts *server.Options) *server.Server {
	tb.Helper()
	return natstest.Start(tb, opts)
}

func connect(tb testing.TB, s *server.Server) *nats.Conn {
	tb.Helper()
	// Slow consumer errors are expected in some tests and counted by the
	// worker; keep them out of the test output.
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	return nc
}

// fixture is a worker on its own connection, and a client connection.
type fixture struct {
	srv    *server.Server
	nc     *nats.Conn // the client's
	wc     *nats.Conn // the worker's
	worker *consumer.Worker
	mgr    *state.Manager // the state of startWorker's worker
}

// startWorker runs a worker with cfg on srv, over a Manager; Cleanup shuts
// it down.
func startWorker(tb testing.TB, srv *server.Server, cfg consumer.Config) *fixture {
	tb.Helper()
	mgr := state.NewManager(state.Options{})
	f := startWorkerOn(tb, srv, mgr, cfg)
	f.mgr = mgr
	return f
}

// report encodes a report of node with flows given as id -> (size, last).
func report(node uint64, flows ...flowstate.Flow) []byte {
	return codec.AppendReport(nil, &codec.Report{NodeID: node, Flows: flows})
}

func flow(id flowstate.FlowID, size uint64, last int64) flowstate.Flow {
	return flowstate.Flow{ID: id, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: size, LastExecTime: last}
}

func subject(node uint64) string { return "flow.heartbeat." + strconv.FormatUint(node, 10) }

// send sends body on subject as a request and returns the reply.
func send(tb testing.TB, nc *nats.Conn, subj string, body []byte) *nats.Msg {
	tb.Helper()
	msg, err := nc.Request(subj, body, wait)
	require.NoError(tb, err)
	return msg
}

// ack sends a report as a request and requires an ack; it returns its revision.
func ack(tb testing.TB, nc *nats.Conn, node uint64, body []byte) uint64 {
	tb.Helper()
	msg := send(tb, nc, subject(node), body)
	require.Empty(tb, msg.Header.Get("Nats-Service-Error"), "report rejected")
	rev, err := strconv.ParseUint(msg.Header.Get(protocol.HeaderRevision), 10, 64)
	require.NoError(tb, err)
	return rev
}

// get returns the aggregate's body, revision and epoch.
func get(tb testing.TB, nc *nats.Conn, asJSON bool) ([]byte, uint64, string) {
	tb.Helper()
	req := nats.NewMsg("flow.state.get")
	if asJSON {
		req.Header.Set("Accept", "application/json")
	}
	msg, err := nc.RequestMsg(req, wait)
	require.NoError(tb, err)
	require.Empty(tb, msg.Header.Get("Nats-Service-Error"), "get failed")
	rev, err := strconv.ParseUint(msg.Header.Get(protocol.HeaderRevision), 10, 64)
	require.NoError(tb, err)
	return msg.Data, rev, msg.Header.Get(protocol.HeaderEpoch)
}
