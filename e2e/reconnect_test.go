package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"

	"github.com/flowstate-io/flowstate/internal/wait"
)

// TestWorkerServesAgainAfterServerRestart restarts the NATS server under a
// running worker and requires it to reconnect and serve the same state,
// then apply new reports in the same epoch.
func TestWorkerServesAgainAfterServerRestart(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--publish-interval", "0")
	c := newClient(t, w, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	s := flowState{StateSize: map[uint32]uint64{1: 1}, LastExecTime: map[uint32]int64{1: 100}}
	c.report(1, codecReport(1, s))
	before := c.get()

	srv.Restart()

	// Poll get until the worker is back (it reconnects after 0.5–1.5 s).
	var msg *nats.Msg
	wait.Until(t, startTimeout, 50*time.Millisecond, func() (bool, string) {
		var err error
		msg, err = c.nc.Request(w.Prefix+".state.get", nil, time.Second)
		return err == nil, fmt.Sprintf("worker does not serve since the server restart: %v; stderr:\n%s", err, w.Stderr())
	})
	after := parseAggregateMsg(t, msg)
	assert.Equal(t, before.version, after.version, "version after the server restart")
	assert.Equal(t, before.Body, after.Body, "state after the server restart")

	u := c.subscribeUpdates()
	s.StateSize[2] = 2
	ack := c.report(1, codecReport(1, s))
	assert.Equal(t, before.Epoch, ack.Epoch)
	assert.Greater(t, ack.Revision, before.Revision)
	assert.Equal(t, ack, u.next().version)
	c.requireState(s)
}

// TestWorkerConnectsThroughURLList gives the worker a comma-separated list
// whose first server is down, and requires it to serve through the other.
func TestWorkerConnectsThroughURLList(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	down := "nats://127.0.0.1:" + strconv.Itoa(freePort(t))
	w := launchWorker(t, nil, "--nats-url", down+", "+srv.URL)
	w.URL = srv.URL
	w.awaitReady()
	c := newClient(t, w)
	ack := c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 1})))
	assert.Equal(t, ack, c.requireState(lastExec(map[uint32]int64{1: 1})))
}
