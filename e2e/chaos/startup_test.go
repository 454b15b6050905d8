package chaos

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startingOrRetrying is a line a starting worker writes once it serves or
// once it found JetStream unavailable and waits.
var startingOrRetrying = regexp.MustCompile(`msg=serving|JetStream not available yet, retrying`)

// TestWorkersRestartedWhileTheStreamLeaderIsCutOffServeOnceHealed kills
// two workers, one on a server of the majority and one on the bucket's
// stream leader, cuts the leader's routes, and starts both again while it
// is cut off: the one on the old leader cannot reach the stream's new
// leader, and the other may ask a leader just elected. Neither may take
// what they see meanwhile (timeouts, refused probes) as a server's
// version, or exit: each waits, and serves once the routes are back.
func TestWorkersRestartedWhileTheStreamLeaderIsCutOffServeOnceHealed(t *testing.T) {
	const leader = 2
	h := newHistory()
	s, _ := startLedSystem(t, h, systemConfig{on: []int{0, leader}}, leader)
	onS0, err := s.connect("flownode")
	require.NoError(t, err)
	defer onS0.Close()
	requireAcked(t, onS0, 1, 1, startTimeout)

	for _, w := range s.workers {
		require.NoError(t, w.Kill())
	}
	routes := routeLinks(s, leader)
	for _, l := range routes {
		l.Cut()
	}
	for _, w := range s.workers {
		require.NoError(t, w.start(h.now))
	}
	for _, w := range s.workers {
		_, err := w.AwaitOutput(startingOrRetrying, startTimeout)
		require.NoError(t, err, "%s started while s%d is cut off", w.name, leader)
	}
	for _, l := range routes {
		l.Heal()
	}
	for _, w := range s.workers {
		require.NoError(t, w.awaitReady(), "%s serves once the routes are back", w.name)
		out := w.Output().String()
		assert.NotContains(t, out, "does not enforce subject-fenced writes", w.name)
		assert.NotContains(t, out, "start failed", w.name)
	}
	requireAcked(t, onS0, 1, 2, startTimeout)
}
