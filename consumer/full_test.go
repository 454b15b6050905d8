package consumer_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/protocol"
)

// fullInterval is long enough for three acked reports on loopback, even
// under the race detector on a loaded machine.
const fullInterval = 2 * time.Second

// nextRevision returns the revision of the next message of sub.
func nextRevision(tb testing.TB, sub *nats.Subscription) uint64 {
	tb.Helper()
	msg, err := sub.NextMsg(wait)
	require.NoError(tb, err)
	rev, err := strconv.ParseUint(msg.Header.Get(protocol.HeaderRevision), 10, 64)
	require.NoError(tb, err)
	return rev
}

// With FullInterval, deltas follow every change while full updates go out
// at most once per interval: the first at once, then one carrying the last
// change once the interval has passed, though no change follows it.
func TestFullUpdatesKeepTheirOwnCadence(t *testing.T) {
	f := startWorker(t, startServer(t, nil), consumer.Config{PublishInterval: 0, FullInterval: fullInterval})
	full, err := f.nc.SubscribeSync("flow.state")
	require.NoError(t, err)
	deltas, err := f.nc.SubscribeSync("flow.state.delta")
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())

	var revs []uint64
	for node := uint64(1); node <= 4; node++ {
		rev := ack(t, f.nc, node, report(node, flow(1, node, 100)))
		require.Equal(t, rev, nextRevision(t, deltas), "a delta for every change")
		revs = append(revs, rev)
	}
	assert.Equal(t, revs[0], nextRevision(t, full), "the first change goes out in full at once")
	assert.Equal(t, revs[3], nextRevision(t, full), "the next full update carries the last change, after the interval")
	require.NoError(t, f.nc.Flush())
	n, _, err := full.Pending()
	require.NoError(t, err)
	assert.Zero(t, n, "no full update for the changes between")
}
