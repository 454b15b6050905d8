package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorkersOfAStoreThatForgotServeOneStateInANewEpoch is the store that
// forgets acknowledged writes, as an operator restoring a backup (or a
// power loss of the server's lazy fsync) makes it: nodes 1 to 5 are acked;
// the server's store is copied; nodes 6 to 8 are acked; the server comes
// back with the copy. The worker that acked 6 to 8 and a worker started
// after the restore must serve one state, the store's, in a new epoch (no
// two states at one epoch), and take reports again.
func TestWorkersOfAStoreThatForgotServeOneStateInANewEpoch(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, "-js", "-sd", dir)
	args := []string{"--kv-storage", "file"}
	a := startJSWorkers(t, srv.URL, 1, args...)[0]
	c := newClient(t, a, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	last := map[uint64]flowState{}
	for node := uint64(1); node <= 5; node++ {
		last[node] = nodeReport(node, 1)
		c.report(node, codecReport(node, last[node]))
	}
	kept := aggregateOf(last)

	srv.Stop()
	backup := filepath.Join(t.TempDir(), "backup")
	run(t, "cp", "-a", dir, backup)
	srv.Restart()
	var lost version
	for node := uint64(6); node <= 8; node++ {
		lost = reportUntilAcked(t, c, node, codecReport(node, nodeReport(node, 1)))
	}

	srv.Stop()
	require.NoError(t, os.RemoveAll(dir))
	run(t, "cp", "-a", backup, dir)
	srv.Restart()
	back := time.Now()
	b := startJSWorkers(t, srv.URL, 1, args...)[0]

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker a:\n%s\nworker b:\n%s", a.p.stderr.String(), b.p.stderr.String())
		}
	})
	fresh := awaitEpochChange(t, c, lost.Epoch, 30*time.Second)
	assert.True(t, strings.HasSuffix(fresh.Epoch, "-kept"), "a new epoch that keeps the store's content: %q", fresh.Epoch)
	awaitConverged(t, c, kept, 10, 30*time.Second)
	ack := reportUntilAcked(t, c, 9, codecReport(9, nodeReport(9, 1)))
	t.Logf("the server came back with a copy of its store; the first ack %v after it, at %+v (the lost writes were at %+v); workers %s and %s",
		time.Since(back).Round(time.Millisecond), ack, lost, a.ID, b.ID)
	assert.NotEqual(t, lost.Epoch, ack.Epoch)
	awaitEveryWorkerAt(t, c, ack, 30*time.Second, "after the store forgot")
	last[9] = nodeReport(9, 1)
	assert.Equal(t, aggregateOf(last).normalized(), decodeAggregate(t, c.get().Body), "the store's reports and the new one; 6 to 8 forgotten")
}

// reportUntilAcked sends node's report until a worker acks it (a worker
// whose store is back answers 503 until then), within 30 s.
func reportUntilAcked(t *testing.T, c *client, node uint64, body []byte) version {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg, err := c.nc.Request(c.heartbeatSubject(node), body, requestTimeout)
		if err == nil && msg.Header.Get(micro.ErrorCodeHeader) == "" {
			return requireAck(t, msg)
		}
		require.True(t, time.Now().Before(deadline), "report of node %d not acked within 30 s: %v %v", node, err, msg)
		time.Sleep(50 * time.Millisecond)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
}
