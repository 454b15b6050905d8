package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/internal/natstest"
)

// A watch is stuck only when it has delivered nothing for three idle
// heartbeats while a write the store saw stored is ahead of it and nothing
// waits in its subscription: an idle bucket, a watch that moves, or one
// whose messages wait to be taken (after a pause of the process) is not.
func TestWatchStuckOnlyWhenNothingMovesWhileAStoredWriteIsAhead(t *testing.T) {
	nc, err := nats.Connect(natstest.Start(t, nil).ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync("watched")
	require.NoError(t, err)
	m := clock.NewManual(time.Unix(1_700_000_000, 0))
	s := &Store{cfg: Config{Clock: m, Heartbeat: time.Second}}
	p := &pass{last: 5}
	var pr progress

	require.NoError(t, s.watchStuck(sub, p, &pr))
	m.Advance(time.Hour)
	require.NoError(t, s.watchStuck(sub, p, &pr), "nothing stored ahead: an idle bucket")

	s.stored(9)
	require.NoError(t, s.watchStuck(sub, p, &pr))
	m.Advance(2 * time.Second)
	require.NoError(t, s.watchStuck(sub, p, &pr))
	p.last = 6
	require.NoError(t, s.watchStuck(sub, p, &pr), "it delivered a write: it moves")
	m.Advance(2900 * time.Millisecond)
	require.NoError(t, s.watchStuck(sub, p, &pr))
	m.Advance(200 * time.Millisecond)
	err = s.watchStuck(sub, p, &pr)
	require.Error(t, err, "three heartbeats without a write while revision 9 was stored")
	assert.Contains(t, err.Error(), "the watch delivered nothing for 3.1s, at revision 6, while revision 9 was stored")

	require.NoError(t, nc.Publish("watched", nil))
	require.NoError(t, nc.Flush())
	for i := 0; ; i++ {
		if n, _, _ := sub.Pending(); n > 0 {
			break
		}
		require.Less(t, i, 500, "the message never reached the subscription")
		time.Sleep(10 * time.Millisecond)
	}
	pr = progress{}
	require.NoError(t, s.watchStuck(sub, p, &pr))
	m.Advance(10 * time.Second)
	require.NoError(t, s.watchStuck(sub, p, &pr), "a message waits to be taken")
}
