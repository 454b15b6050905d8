package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUpdateCarriesAggregateAfterReport subscribes to <prefix>.state first,
// then sends reports, and requires an update after each, carrying the
// aggregate with the report's version and msgpack headers.
func TestUpdateCarriesAggregateAfterReport(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--prefix", "pub.default")
	c := newClient(t, w)
	u := c.subscribeUpdates()

	ack := c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 100})))
	first := u.next()
	assert.Equal(t, ack, first.version, "the first change after a quiet interval goes out at once")
	assert.Equal(t, c.get().Body, first.Body)
	assert.Equal(t, canonicalMsgpack(lastExec(map[uint32]int64{1: 100})), first.Body)

	ack = c.report(2, codecReport(2, lastExec(map[uint32]int64{2: 200})))
	got := u.until(ack.Revision)
	second := got[len(got)-1]
	require.Len(t, got, 1, "one update per change")
	assert.Equal(t, ack, second.version)
	assert.Equal(t, canonicalMsgpack(lastExec(map[uint32]int64{1: 100, 2: 200})), second.Body)
}

// TestCoalescedUpdatesEndWithTheLastState sends reports faster than the
// publish interval and requires fewer updates than reports, with strictly
// increasing revisions, the last one equal to a get.
func TestCoalescedUpdatesEndWithTheLastState(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--publish-interval", "500ms")
	c := newClient(t, w)
	u := c.subscribeUpdates()

	const reports = 50
	for i := range reports {
		node := uint64(i%5 + 1)
		c.report(node, msgpackReport(t, node, flowState{
			StateSize:    map[uint32]uint64{uint32(node): uint64(i)},
			LastExecTime: map[uint32]int64{uint32(node): int64(i)},
		}, keyStyle(i%3)))
	}
	final := c.get()
	got := u.until(final.Revision)
	last := got[len(got)-1]
	assert.Equal(t, final.version, last.version, "the last update is at the get's version")
	assert.Equal(t, final.Body, last.Body, "the last update is the get's aggregate")
	assert.Less(t, len(got), reports, "updates were coalesced")
	for i := 1; i < len(got); i++ {
		assert.Equal(t, final.Epoch, got[i].Epoch)
		assert.Greater(t, got[i].Revision, got[i-1].Revision, "revision of update %d", i)
	}

	// Nothing stale follows: the next update is the next change.
	ack := c.report(9, codecReport(9, lastExec(map[uint32]int64{9: 9})))
	next := u.next()
	assert.Equal(t, ack, next.version, "the update after the last state is the next change")
}

// TestUnthrottledUpdatesFollowEveryChange runs with --publish-interval 0
// and requires exactly one update per report that changed the aggregate,
// and none for a report that changed nothing.
func TestUnthrottledUpdatesFollowEveryChange(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--publish-interval", "0")
	c := newClient(t, w)
	u := c.subscribeUpdates()

	type expected struct {
		version
		body []byte
	}
	var want []expected
	reported := map[uint64]flowState{}
	send := func(node uint64, s flowState, changes bool) {
		t.Helper()
		ack := c.report(node, codecReport(node, s))
		reported[node] = s
		if changes {
			want = append(want, expected{ack, canonicalMsgpack(aggregateOf(reported))})
		}
	}
	for i := range 10 {
		node := uint64(i%3 + 1)
		send(node, flowState{StateSize: map[uint32]uint64{uint32(i): uint64(i + 1)}}, true)
	}
	same := flowState{LastExecTime: map[uint32]int64{7: 7}}
	send(4, same, true)
	send(4, same, false) // the same report again changes nothing
	send(5, flowState{}, false)
	send(4, flowState{}, true)

	got := u.until(want[len(want)-1].Revision)
	require.Len(t, got, len(want), "one update per change")
	for i := range want {
		assert.Equal(t, want[i].version, got[i].version, "update %d", i)
		assert.Equal(t, want[i].body, got[i].Body, "update %d", i)
	}
}
