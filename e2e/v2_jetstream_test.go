package e2e

import (
	"bytes"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	fsclient "github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
)

// TestJetStreamWatchFollowsDeltasAcrossAPublisherChange watches three
// workers that share a JetStream state with client.Watch (deltas and
// chunked gets, whichever worker answers) while reports come from 50 nodes
// and two of the workers are killed, the publisher possibly among them: a
// new publisher's deltas make the watch resync, and it ends on the final
// state, never yielding a state twice or going back.
func TestJetStreamWatchFollowsDeltasAcrossAPublisherChange(t *testing.T) {
	t.Parallel()
	srv := startJetStreamServer(t)
	ws := startJSWorkers(t, srv.URL, 3, "--publish-interval", "10ms")
	c := newClient(t, ws[0])
	nc := connect(t, srv.URL, nats.MaxReconnects(-1))
	// A get of the watch's that reached a worker killed before it answered
	// ends at the client's timeout, then the watch asks again: a timeout
	// well within nextState's wait, so that one such get cannot use it up.
	fc, err := fsclient.New(nc, fsclient.Options{Timeout: requestTimeout, WatchMode: fsclient.WatchV2})
	require.NoError(t, err)

	states := startStateWatch(t, fc)
	first := nextState(t, states)

	r := startReporters(t, c, 50, 20*time.Millisecond)
	r.awaitAcks(200, 30*time.Second)
	ws[0].Kill()
	r.awaitAcks(200, 30*time.Second)
	ws[1].Kill()
	r.awaitAcks(200, 30*time.Second)
	r.stopAndWait()
	final := requireConverged(t, c, r.want(), 5)
	want := canonicalMsgpack(r.want())

	// The watch ends on the final aggregate. Its revision may be below
	// final's: a report that changed nothing (one sent again after its
	// first copy was stored by a worker killed before it answered) moves
	// the revision without an update, as the contract publishes changes.
	last := first
	n := 1
	for last.Epoch != final.Epoch || !bytes.Equal(want, codec.AppendAggregate(nil, last.Value.Flows())) {
		s := nextState(t, states)
		n++
		if s.Epoch == last.Epoch {
			require.Greater(t, s.Revision, last.Revision, "never twice, never backwards")
		}
		last = s
	}
	assert.LessOrEqual(t, last.Revision, final.Revision, "no revision past the final state's")
	t.Logf("%d states yielded for %d acked reports; the last at revision %d, the final state's %d", n, r.acked(), last.Revision, final.Revision)
}
