package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notPublished matches the worker's log line for an update that was too
// large to send.
var notPublished = regexp.MustCompile(`msg="state update not published"`)

// TestOversizedAggregateIsRefusedWith413 grows the aggregate past the
// server's max payload, and requires gets to be answered 413, oversized
// updates to be skipped and logged, and updates to resume once the
// aggregate fits again.
func TestOversizedAggregateIsRefusedWith413(t *testing.T) {
	t.Parallel()
	const maxPayload = 2048
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("max_payload: "+strconv.Itoa(maxPayload)+"\n"), 0o600))
	srv := startServer(t, "-c", conf)
	w := startWorker(t, srv.URL, "--publish-interval", "0")
	c := newClient(t, w)
	u := c.subscribeUpdates()

	// Headers travel in the payload too: leave them room.
	const headerRoom = 256
	expected := map[uint64][]byte{} // aggregate at each acked revision
	var mustPublish, mustNotPublish []uint64
	reported := map[uint64]flowState{}
	send := func(node uint64, s flowState) uint64 {
		t.Helper()
		ack := c.report(node, codecReport(node, s))
		reported[node] = s
		body := canonicalMsgpack(aggregateOf(reported))
		expected[ack.Revision] = body
		switch {
		case len(body)+headerRoom <= maxPayload:
			mustPublish = append(mustPublish, ack.Revision)
		case len(body) > maxPayload:
			mustNotPublish = append(mustNotPublish, ack.Revision)
		}
		return ack.Revision
	}
	const nodes, flowsPerNode = 30, 10
	for n := uint64(1); n <= nodes; n++ {
		s := flowState{StateSize: map[uint32]uint64{}}
		for k := range uint64(flowsPerNode) {
			s.StateSize[uint32(n*100000+k)] = 1<<40 + k
		}
		send(n, s)
	}
	require.NotEmpty(t, mustPublish, "the aggregate fitted at first")
	require.NotEmpty(t, mustNotPublish, "the aggregate outgrew the max payload")

	for _, accept := range []string{"", contentJSON} {
		h := nats.Header{}
		if accept != "" {
			h.Set(hdrAccept, accept)
		}
		msg := c.request(w.Prefix+".state.get", nil, h)
		assert.Equal(t, "413", msg.Header.Get(micro.ErrorCodeHeader), "get of an oversized aggregate, Accept %q", accept)
		assert.NotEmpty(t, msg.Header.Get(micro.ErrorHeader))
	}
	w.waitStderr(notPublished)

	// Shrink it again: updates resume.
	var last uint64
	for n := uint64(nodes); n >= 2; n-- {
		last = send(n, flowState{})
	}
	got := u.until(last)
	published := map[uint64]bool{}
	for _, m := range got {
		published[m.Revision] = true
		assert.Equal(t, expected[m.Revision], m.Body, "update at revision %d", m.Revision)
	}
	for _, rev := range mustPublish {
		assert.True(t, published[rev], "update at revision %d (fits) was published", rev)
	}
	for _, rev := range mustNotPublish {
		assert.False(t, published[rev], "update at revision %d (too large) was published", rev)
	}
	c.requireState(reported[1])
}
