package main

import (
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPProfOnlyWithTheFlag(t *testing.T) {
	url := "nats://127.0.0.1:" + strconv.Itoa(serverOnPort(t, freePort(t)).Addr().(*net.TCPAddr).Port)
	m, _ := startMain(t, "--nats-url", url, "--metrics-addr", "127.0.0.1:0")
	code, _ := scrape(t, m.metricsAddr, "/debug/pprof/")
	assert.Equal(t, http.StatusNotFound, code, "pprof is off by default")

	m, _ = startMain(t, "--nats-url", url, "--prefix", "pprof", "--metrics-addr", "127.0.0.1:0", "--pprof")
	code, _ = scrape(t, m.metricsAddr, "/debug/pprof/")
	assert.Equal(t, http.StatusOK, code, "--pprof")
}

func TestIdleMetricsConnectionsAreCappedAndReadyzAnswers(t *testing.T) {
	url := "nats://127.0.0.1:" + strconv.Itoa(serverOnPort(t, freePort(t)).Addr().(*net.TCPAddr).Port)
	m, _ := startMain(t, "--nats-url", url, "--metrics-addr", "127.0.0.1:0")
	awaitStatus(t, m.metricsAddr, "/readyz", http.StatusOK)

	// Idle connections that never send a request, four times the cap.
	const idle = 4 * metricsMaxConns
	conns := make([]net.Conn, 0, idle)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range idle {
		c, err := net.DialTimeout("tcp", m.metricsAddr, time.Second)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	httpc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := httpc.Get("http://" + m.metricsAddr + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	// The server closed the oldest idle connections: reading one ends.
	closed := 0
	for _, c := range conns[:idle-metricsMaxConns] {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			closed++
		}
	}
	assert.GreaterOrEqual(t, closed, idle-2*metricsMaxConns, "idle connections past the cap are closed")
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
