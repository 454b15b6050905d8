package e2e

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// signalLogger is a lineLogger that also hands each line to lines.
type signalLogger struct {
	lineLogger
	mu    sync.Mutex // guards part
	part  []byte
	lines chan string
}

func (l *signalLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := strings.IndexByte(string(l.part), '\n')
		if i < 0 {
			break
		}
		select {
		case l.lines <- string(l.part[:i]):
		default: // nobody waits for it
		}
		l.part = l.part[i+1:]
	}
	return l.lineLogger.Write(p)
}

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
	cmd := exec.CommandContext(ctx, node, "v2.mjs", w.URL, w.Prefix)
	cmd.Dir = jsDir
	cmd.Env = cleanEnv()
	cmd.WaitDelay = stopTimeout
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout := &signalLogger{lineLogger: lineLogger{t: t}, lines: make(chan string, 100)}
	cmd.Stdout = stdout
	stderr := &lineLogger{t: t, prefix: "stderr: "}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())

	restarted := false
	for !restarted {
		select {
		case line := <-stdout.lines:
			if line != "# restart the worker" {
				continue
			}
			w.Kill()
			w2 := launchWorker(t, nil, "--nats-url", srv.URL, "--prefix", "jsv2", "--publish-interval", "10ms")
			w2.awaitReady(w.ID)
			_, err := io.WriteString(stdin, "restarted\n")
			require.NoError(t, err)
			restarted = true
		case <-ctx.Done():
			require.FailNow(t, "v2.mjs did not ask for the restart")
		}
	}
	err = cmd.Wait()
	out := stdout.close()
	stderr.close()
	require.Equal(t, 4, requireJSPassed(t, ctx, "v2.mjs", out, err), "checks run")
}
