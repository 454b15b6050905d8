package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/kv"
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

// putDone is a kv.PutReceiver that hands the answer to a channel.
type putDone chan error

func (d putDone) PutDone(_ kv.Revision, err error) { d <- err }

// The store counts as seen stored every write that the stream said it
// holds: its own acknowledged writes, the probe's, and the key's last write
// that a refused conditional write names. A worker whose writes all come
// back refused after a partition (another worker wrote the keys meanwhile)
// so knows how far the stream has gone, and its watch, stuck on a server
// whose stream is behind, is found stuck.
func TestTheStoreSeesStoredWhatTheStreamAcknowledgesOrNamesInARefusal(t *testing.T) {
	srv := natstest.Start(t, &server.Options{JetStream: true})
	open := func() *Store {
		nc, err := nats.Connect(srv.ClientURL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		st, err := Open(t.Context(), nc, Config{Bucket: "seen_stored"})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		return st
	}
	st, other := open(), open()
	const key = "node/1"
	writeElsewhere := func(n int) uint64 {
		var rev kv.Revision
		for range n {
			var err error
			rev, err = other.Put(t.Context(), key, []byte("v"))
			require.NoError(t, err)
		}
		require.Greater(t, rev.Seq, st.storedSeq.Load(), "the other store's writes are ahead of what this one saw")
		return rev.Seq
	}

	last := writeElsewhere(3)
	_, err := st.PutIf(t.Context(), key, []byte("mine"), kv.Condition{Key: key, Revision: 1})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	assert.Equal(t, last, st.storedSeq.Load(), "a refused conditional write names the key's last write")

	last = writeElsewhere(2)
	done := make(putDone, 1)
	require.NoError(t, st.PutAsync(t.Context(), key, []byte("mine"), kv.Condition{Key: key, Revision: 1}, done))
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the refused put was never answered")
	}
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	assert.Equal(t, last, st.storedSeq.Load(), "a refused put in flight names the key's last write")

	last = writeElsewhere(2)
	require.NoError(t, st.probeWrite(t.Context()))
	assert.Equal(t, last+1, st.storedSeq.Load(), "the probe's write, stored after the other store's")

	rev, err := st.Put(t.Context(), "node/2", []byte("mine"))
	require.NoError(t, err)
	assert.Equal(t, rev.Seq, st.storedSeq.Load(), "an acknowledged write")
}
