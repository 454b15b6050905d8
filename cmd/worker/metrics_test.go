package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/internal/wait"
)

// startMain opens a worker with args and runs its group; stop (also run
// at Cleanup) ends the group and closes the worker, once.
func startMain(t *testing.T, args ...string) (m *Main, stop func()) {
	t.Helper()
	m = &Main{}
	require.NoError(t, m.ParseFlags(args, noEnv, io.Discard, io.Discard))
	require.NoError(t, m.Open())
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx, signals{log: m.Log}) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-ran)
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer ccancel()
			assert.NoError(t, m.Close(cctx))
		})
	}
	t.Cleanup(stop)
	return m, stop
}

// serverOnPort runs an embedded NATS server on 127.0.0.1:port.
func serverOnPort(tb testing.TB, port int) *server.Server {
	tb.Helper()
	return natstest.Start(tb, &server.Options{Port: port})
}

func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// scrape returns the status and body of a metrics path.
func scrape(tb testing.TB, addr, path string) (int, string) {
	tb.Helper()
	resp, err := http.Get("http://" + addr + path)
	require.NoError(tb, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(tb, err)
	return resp.StatusCode, string(body)
}

// awaitStatus polls path until it answers want, within a bound.
func awaitStatus(tb testing.TB, addr, path string, want int) {
	tb.Helper()
	wait.Until(tb, 15*time.Second, 20*time.Millisecond, func() (bool, string) {
		code, _ := scrape(tb, addr, path)
		return code == want, fmt.Sprintf("%s answers %d, not %d", path, code, want)
	})
}

func TestMetricsCountReportsAndReadinessFollowsNATS(t *testing.T) {
	port := freePort(t)
	srv := serverOnPort(t, port)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	m, closeMain := startMain(t, "--nats-url", url, "--metrics-addr", "127.0.0.1:0")
	awaitStatus(t, m.metricsAddr, "/readyz", http.StatusOK)

	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	good := codec.AppendReport(nil, &codec.Report{NodeID: 7, Flows: []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 9}}})
	_, err = nc.Request("flow.heartbeat.7", good, 5*time.Second)
	require.NoError(t, err)
	msg, err := nc.Request("flow.heartbeat.8", good, 5*time.Second) // node id mismatch
	require.NoError(t, err)
	require.Equal(t, "400", msg.Header.Get("Nats-Service-Error-Code"))

	code, body := scrape(t, m.metricsAddr, "/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, line := range []string{
		"flowstate_reports_received_total 2",
		"flowstate_reports_applied_total 1",
		"flowstate_acks_total 1",
		`flowstate_reports_rejected_total{reason="subject_mismatch"} 1`,
		"flowstate_nodes 1",
		"flowstate_flows 1",
		"flowstate_nats_connected 1",
		"flowstate_merge_seconds_count 1",
		"flowstate_chunked_gets_total 0",
		"flowstate_chunks_sent_total 0",
		"flowstate_oldest_unanswered_report_seconds 0",
		"flowstate_unanswered_reports 0",
	} {
		assert.Contains(t, body, line+"\n")
	}

	// NATS goes away: not ready; it comes back: ready again, by itself.
	srv.Shutdown()
	srv.WaitForShutdown()
	awaitStatus(t, m.metricsAddr, "/readyz", http.StatusServiceUnavailable)
	code, _ = scrape(t, m.metricsAddr, "/healthz")
	assert.Equal(t, http.StatusOK, code, "healthy while NATS is down")
	serverOnPort(t, port)
	awaitStatus(t, m.metricsAddr, "/readyz", http.StatusOK)
	_, body = scrape(t, m.metricsAddr, "/metrics")
	assert.Contains(t, body, "flowstate_nats_reconnects_total 1\n")
	closeMain() // while the server is up, so that the drain completes
}

// TestMetricsShowErrorBytesAgainstTheLimitAndStaleReports: the bytes of
// error messages and the errors the state holds, beside --max-error-bytes
// and --max-errors, and the stale
// reports (protocol v3) among the rejections.
func TestMetricsShowErrorBytesAgainstTheLimitAndStaleReports(t *testing.T) {
	srv := natstest.Start(t, &server.Options{})
	m, _ := startMain(t, "--nats-url", srv.ClientURL(), "--metrics-addr", "127.0.0.1:0", "--max-error-bytes", "100", "--max-errors", "50")
	awaitStatus(t, m.metricsAddr, "/readyz", http.StatusOK)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	send := func(seq uint64, message string) string {
		t.Helper()
		rep := &codec.Report{NodeID: 7, NodeEpoch: 1_700_000_000_000, HasNodeEpoch: true, Health: flowstate.Health{
			HasSeq: true, Seq: seq, HasLastErrors: true,
			Flows: []flowstate.FlowHealth{{ID: 1, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{{Time: 1, Message: message}}}},
		}}
		msg, err := nc.Request("flow.heartbeat.7", codec.AppendReport(nil, rep), 5*time.Second)
		require.NoError(t, err)
		return msg.Header.Get("Nats-Service-Error-Code")
	}
	require.Empty(t, send(2, strings.Repeat("e", 30)))
	require.Equal(t, "409", send(1, "late"))
	require.Equal(t, "507", send(3, strings.Repeat("e", 101)))

	_, body := scrape(t, m.metricsAddr, "/metrics")
	for _, line := range []string{
		"flowstate_error_bytes 30",
		"flowstate_max_error_bytes 100",
		"flowstate_errors 1",
		"flowstate_max_errors 50",
		`flowstate_reports_rejected_total{reason="stale"} 1`,
		`flowstate_reports_rejected_total{reason="capacity"} 1`,
	} {
		assert.Contains(t, body, line+"\n")
	}
}
