package e2e

import (
	"io"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// metricsListening matches the worker's log line for its metrics server.
var metricsListening = regexp.MustCompile(`msg="metrics listening" addr=(127\.0\.0\.1:\d+)`)

// TestMetricsEndpointsAnswer runs the worker with --metrics-addr on port 0
// and requires /healthz, /readyz and /metrics to answer 200.
func TestMetricsEndpointsAnswer(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--metrics-addr", "127.0.0.1:0")
	addr := w.waitStderr(metricsListening)[1]
	c := newClient(t, w)
	c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 1})))

	httpc := &http.Client{Timeout: requestTimeout}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := httpc.Get("http://" + addr + path)
		require.NoError(t, err, path)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		if path == "/metrics" {
			assert.Regexp(t, `(?m)^flowstate_\w+ `, string(body), "worker metrics are exposed")
		}
	}
}
