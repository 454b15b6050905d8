package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/netfault"
	"github.com/flowstate-io/flowstate/internal/proctest"
	"github.com/flowstate-io/flowstate/internal/wait"
)

// workerServerConf is the server configuration for workers of docs/operating.md: a
// client that stops answering pings, or whose socket takes nothing for the
// write deadline, is closed within 20 s, so that a deaf worker's
// subscription leaves its queue group.
const workerServerConf = proctest.WorkerServerConfig

// Bounds of the deaf-worker tests (the targets).
const (
	stallFor   = 30 * time.Second // how long the link stays stalled
	noticeWait = 20 * time.Second // /readyz answers 503 after a stall, 200 after its end, within this
)

// awaitReadyz polls the worker's /readyz until it answers want, within
// bound, and returns the body of that answer.
func awaitReadyz(t testing.TB, w *workerProc, addr string, want int, bound time.Duration) string {
	t.Helper()
	httpc := &http.Client{Timeout: time.Second}
	var answered string
	wait.Until(t, bound, 100*time.Millisecond, func() (bool, string) {
		resp, err := httpc.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == want {
				answered = strings.TrimSpace(string(body))
				return true, ""
			}
			err = fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		require.False(t, w.p.exited(), "worker exited with code %d; stderr:\n%s", w.p.code, w.Stderr())
		return false, fmt.Sprintf("/readyz did not answer %d; last: %v; stderr:\n%s", want, err, w.Stderr())
	})
	return answered
}

// reportSoon sends a report as a request until it is acked, within
// noticeWait: right after a link heals, a first request may still find
// the worker's old subscription.
func reportSoon(t testing.TB, c *client, node uint64, s flowState) version {
	t.Helper()
	var msg *nats.Msg
	wait.Until(t, noticeWait, 0, func() (bool, string) {
		var err error
		msg, err = c.nc.Request(c.heartbeatSubject(node), codecReport(node, s), time.Second)
		if err == nil {
			return true, ""
		}
		require.True(t, errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders), "report of node %d: %v", node, err)
		return false, fmt.Sprintf("report of node %d not acked: %v", node, err)
	})
	return requireAck(t, msg)
}

// A worker whose link to its server stalls (no byte either way, sockets
// open) for 30 s notices it: /readyz answers 503 and flowstate_ready is 0
// within 20 s of the stall, 200 within 20 s of its end, and the worker
// keeps its state: the same epoch, every node's last report.
func TestStalledLinkTurnsTheWorkerNotReadyAndBack(t *testing.T) {
	t.Parallel()
	srv := startConfServer(t, "nats", workerServerConf)
	proxy, err := netfault.Start(strings.TrimPrefix(srv.URL, "nats://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	w := launchWorker(t, nil, "--nats-url", "nats://"+proxy.Addr(), "--metrics-addr", "127.0.0.1:0", "--publish-interval", "0")
	w.URL = srv.URL // clients talk to the server itself
	w.awaitReady()
	addr := w.waitStderr(metricsListening)[1]
	c := newClient(t, w)

	reports := map[uint64]flowState{}
	var before version
	for node := uint64(1); node <= 5; node++ {
		reports[node] = lastExec(map[uint32]int64{uint32(node): 1700000000000 + int64(node)})
		before = c.report(node, codecReport(node, reports[node]))
	}
	awaitReadyz(t, w, addr, http.StatusOK, noticeWait)

	proxy.Stall()
	stalled := time.Now()
	reason := awaitReadyz(t, w, addr, http.StatusServiceUnavailable, noticeWait)
	t.Logf("/readyz 503 %v after the stall: %s", time.Since(stalled).Round(time.Millisecond), reason)
	assert.Contains(t, reason, "NATS not connected")
	if v, ok := scrapeMetric(t, addr, "flowstate_ready"); assert.True(t, ok) {
		assert.Zero(t, v, "flowstate_ready follows /readyz")
	}

	<-time.After(time.Until(stalled.Add(stallFor))) // the fault lasts stallFor
	proxy.Heal()
	healed := time.Now()
	awaitReadyz(t, w, addr, http.StatusOK, noticeWait)
	t.Logf("/readyz 200 %v after the heal", time.Since(healed).Round(time.Millisecond))
	if v, ok := scrapeMetric(t, addr, "flowstate_ready"); assert.True(t, ok) {
		assert.Equal(t, 1.0, v)
	}

	var after version
	for node := uint64(1); node <= 3; node++ {
		reports[node] = lastExec(map[uint32]int64{uint32(node): 1700000001000 + int64(node)})
		after = reportSoon(t, c, node, reports[node])
	}
	assert.Equal(t, before.Epoch, after.Epoch, "the worker kept its state")
	assert.Equal(t, after, c.requireState(aggregateOf(reports)), "every node's last report, nothing else")
}

// jetStreamOnConf enables JetStream in dir, on top of the worker's
// server configuration.
func jetStreamOnConf(dir string) string {
	return workerServerConf + fmt.Sprintf("jetstream {store_dir: %q}\n", dir)
}

// A JetStream worker whose store takes no writes (JetStream disabled on
// its server by a reload, as a full disk or a lost quorum does) answers
// /readyz 503 saying so, with flowstate_store_available and flowstate_ready
// 0, and 200 once JetStream is back.
func TestStoreThatTakesNoWritesTurnsTheWorkerNotReady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startConfServer(t, "nats", jetStreamOnConf(dir))
	w := startWorker(t, srv.URL, "--kv", "jetstream", "--metrics-addr", "127.0.0.1:0")
	addr := w.waitStderr(metricsListening)[1]
	awaitReadyz(t, w, addr, http.StatusOK, noticeWait)

	srv.reload(workerServerConf)
	reason := awaitReadyz(t, w, addr, http.StatusServiceUnavailable, noticeWait)
	assert.Contains(t, reason, "the store takes no writes")
	for _, name := range []string{"flowstate_store_available", "flowstate_ready"} {
		if v, ok := scrapeMetric(t, addr, name); assert.True(t, ok, name) {
			assert.Zero(t, v, name)
		}
	}

	srv.reload(jetStreamOnConf(dir))
	awaitReadyz(t, w, addr, http.StatusOK, noticeWait)
}
