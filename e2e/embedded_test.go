package e2e

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// embeddedListening matches the worker's log line for its embedded server.
var embeddedListening = regexp.MustCompile(`msg="embedded NATS server listening" url=(\S+)`)

// TestEmbeddedServerServesOnLoggedURL runs the worker with no --nats-url on
// port 0, connects to the URL it logs, and requires it to serve there and
// exit 0 on SIGTERM.
func TestEmbeddedServerServesOnLoggedURL(t *testing.T) {
	t.Parallel()
	w := launchWorker(t, nil, "--listen", "127.0.0.1:0", "--publish-interval", "0")
	w.URL = w.waitStderr(embeddedListening)[1]
	require.Regexp(t, `^nats://127\.0\.0\.1:[1-9][0-9]*$`, w.URL)
	w.awaitReady()

	c := newClient(t, w)
	u := c.subscribeUpdates()
	s := flowState{StateSize: map[uint32]uint64{5: 500}, LastExecTime: map[uint32]int64{5: 1700000000000}}
	ack := c.report(3, msgpackReport(t, 3, s, mixedKeys))
	assert.Equal(t, ack, c.requireState(s))
	assert.Equal(t, ack, u.next().version)

	assert.Equal(t, 0, w.Stop(), "exit code after SIGTERM")
}
