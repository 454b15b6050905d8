package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRestartedWorkerStartsNewEpochAtRevisionZero stops a memory-backed
// worker (SIGTERM, or SIGKILL) and starts another on the same server: its
// state starts over empty, at revision 0, in a new epoch.
func TestRestartedWorkerStartsNewEpochAtRevisionZero(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		outcome string
		stop    func(t *testing.T, w *workerProc)
	}{
		{"after SIGTERM", func(t *testing.T, w *workerProc) { require.Equal(t, 0, w.Stop(), "exit code after SIGTERM") }},
		{"after SIGKILL", func(_ *testing.T, w *workerProc) { w.Kill() }},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			w1 := startWorker(t, srv.URL)
			c := newClient(t, w1)
			c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 100})))
			before := c.get()
			require.NotZero(t, before.Revision)
			tc.stop(t, w1)

			w2 := launchWorker(t, nil, "--nats-url", srv.URL)
			w2.awaitReady(w1.ID)
			assert.NotEqual(t, w1.ID, w2.ID)
			m := c.get()
			assert.Zero(t, m.Revision)
			assert.NotEqual(t, before.Epoch, m.Epoch, "epoch after a restart")
			assert.Equal(t, unhex(t, hexEmptyValue), m.Body)
			j := c.getJSON()
			assert.Equal(t, m.version, j.version)
			assert.Equal(t, emptyValueJSON, string(j.Body))

			ack := c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 50})))
			assert.Equal(t, m.Epoch, ack.Epoch, "reports after the restart are in the new epoch")
			c.requireState(lastExec(map[uint32]int64{1: 50}))
		})
	}
}
