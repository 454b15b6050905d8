package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"flowstate/codec"
	"flowstate/flowstate"
	"flowstate/internal/natstest"
)

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
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _ := scrape(tb, addr, path)
		if code == want {
			return
		}
		require.True(tb, time.Now().Before(deadline), "%s did not answer %d", path, want)
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMetricsCountReportsAndReadinessFollowsNATS(t *testing.T) {
	port := freePort(t)
	srv := serverOnPort(t, port)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	cfg, err := parseConfig([]string{"--nats-url", url, "--metrics-addr", "127.0.0.1:0"}, noEnv, io.Discard)
	require.NoError(t, err)
	m := &Main{Config: cfg, Log: slog.New(slog.DiscardHandler)}
	require.NoError(t, m.Run())
	var closed bool
	closeMain := func() {
		if closed {
			return
		}
		closed = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, m.Close(ctx))
	}
	t.Cleanup(closeMain)
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
