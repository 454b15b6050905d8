package e2e

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSigintPublishesPendingStateAndExitsZero runs with a publish interval
// far longer than the test: the first change goes out at once, the next one
// waits for the interval's end, and SIGINT publishes it before the worker
// exits 0.
func TestSigintPublishesPendingStateAndExitsZero(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--publish-interval", "1h")
	c := newClient(t, w)
	u := c.subscribeUpdates()

	first := c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 1})))
	assert.Equal(t, first, u.next().version, "the first change after a quiet interval goes out at once")

	second := c.report(2, codecReport(2, lastExec(map[uint32]int64{2: 2})))
	pending := c.get()
	require.Equal(t, second, pending.version)

	w.p.signal(syscall.SIGINT)
	update := u.next()
	assert.Equal(t, second, update.version, "the pending change is published on shutdown")
	assert.Equal(t, pending.Body, update.Body)
	code, ok := w.p.wait(stopTimeout)
	require.True(t, ok, "worker did not exit after SIGINT")
	assert.Equal(t, 0, code, "exit code after SIGINT")
}
