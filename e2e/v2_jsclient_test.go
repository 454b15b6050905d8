package e2e

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJavaScriptClientFollowsDeltasAcrossARestart runs js/v2.mjs, a
// frontend of PROTOCOL.md v2 in JavaScript: it rebuilds the state from
// flow.state.delta and chunked gets under concurrent reports from 20 nodes
// and checks it against the single-message get, byte for byte; then this
// test restarts the worker (a new epoch) and the script does it again, then
// grows the state past the 1 MB max payload and reads it in chunks.
func TestJavaScriptClientFollowsDeltasAcrossARestart(t *testing.T) {
	t.Parallel()
	node := requireJSClient(t)
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--prefix", "jsv2", "--publish-interval", "10ms")

	ctx, cancel := context.WithTimeout(t.Context(), jsRunTimeout)
	defer cancel()
	run := startJS(t, ctx, node, "v2.mjs", w.URL, w.Prefix)
	for restarted := false; !restarted; {
		select {
		case line := <-run.stdout.lines:
			if line != "# restart the worker" {
				continue
			}
			w.Kill()
			w2 := launchWorker(t, nil, "--nats-url", srv.URL, "--prefix", "jsv2", "--publish-interval", "10ms")
			w2.awaitReady(w.ID)
			_, err := io.WriteString(run.stdin, "restarted\n")
			require.NoError(t, err)
			restarted = true
		case <-run.done():
			run.passed(t)
			require.FailNow(t, "v2.mjs ended without asking for the restart")
		}
	}
	require.Equal(t, 4, run.passed(t), "checks run")
}
