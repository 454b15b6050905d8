package jetstream

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/kv"
)

// TestLeaderSeqOfReadsTheLeaderAndSaysWhenTheKeyIsGone checks the read
// that checkFencing fences its probe on: the epoch key's sequence as the
// leader has it, and a wiped bucket as a reason to try again rather than a
// failure.
func TestLeaderSeqOfReadsTheLeaderAndSaysWhenTheKeyIsGone(t *testing.T) {
	st := openOnServer(t, "leader_seq")

	ep, err := st.currentEpoch(t.Context())
	require.NoError(t, err)
	seq, err := st.leaderSeqOf(t.Context(), st.cfg.EpochKey)
	require.NoError(t, err)
	assert.Equal(t, ep.seq, seq)

	require.NoError(t, st.handles().stream.Purge(t.Context()))
	_, err = st.leaderSeqOf(t.Context(), st.cfg.EpochKey)
	require.ErrorIs(t, err, kv.ErrUnavailable)
	assert.ErrorContains(t, err, "wiped")
	require.NoError(t, st.checkFencing(t.Context()), "a new epoch key is made and fenced on")
}

func TestMajorMinor(t *testing.T) {
	for _, tc := range []struct {
		v            string
		major, minor int
		ok           bool
	}{
		{"2.10.27", 2, 10, true},
		{"2.11.0", 2, 11, true},
		{"v2.12.1-RC.2", 2, 12, true},
		{"2.9.10", 2, 9, true},
		{"", 0, 0, false},
		{"dev", 0, 0, false},
		{"2.x.1", 2, 0, false},
	} {
		major, minor, ok := majorMinor(tc.v)
		assert.Equal(t, tc.ok, ok, tc.v)
		if tc.ok {
			assert.Equal(t, [2]int{tc.major, tc.minor}, [2]int{major, minor}, tc.v)
		}
	}
}

func TestServerTooOldErrorIsOneLineNamingBothVersions(t *testing.T) {
	for _, err := range []*ServerTooOldError{
		{Version: "2.10.27"},
		{Version: "2.11.1", Bucket: "flow_state"},
	} {
		msg := err.Error()
		assert.ErrorIs(t, err, ErrServerTooOld)
		assert.NotContains(t, msg, "\n")
		assert.Contains(t, msg, err.Version)
		assert.Contains(t, msg, "needs nats-server 2.11 or newer")
		assert.Contains(t, msg, "Nats-Expected-Last-Subject-Sequence-Subject")
	}
}

// TestCheckFencingDoesNotCallAModernLeaderOldWhenTheEpochKeyMoves moves the
// epoch key between checkFencing's read of its sequence number and the
// first probe, every time, as a key rewritten meanwhile or a leader behind
// the one read from would: the probe fenced on it is refused. That proves
// nothing about the leader's version, so the check says the answer is not
// known yet (Open retries), names what the leader answered, and passes once
// the key holds still.
func TestCheckFencingDoesNotCallAModernLeaderOldWhenTheEpochKeyMoves(t *testing.T) {
	st := openOnServer(t, "moving_epoch")

	epoch, err := st.Epoch(t.Context())
	require.NoError(t, err)
	moved := 0
	st.afterFenceRead = func() {
		_, err := st.handles().bucket.Put(t.Context(), st.cfg.EpochKey, []byte(epoch)) // the same epoch, a new sequence
		require.NoError(t, err)
		moved++
	}
	for range 5 {
		err = st.checkFencing(t.Context())
		require.Error(t, err)
		assert.NotErrorIs(t, err, ErrServerTooOld)
		assert.ErrorIs(t, err, kv.ErrUnavailable, "retried by Open like any unavailability")
		assert.Regexp(t, `subject-fenced writes not confirmed yet: the stream leader( \(server \S+\))? refused a probe fenced on the epoch key's sequence \d+ \(.*wrong last sequence.*\) and one fenced on the probe key's \d+ \(.*wrong last sequence.*\)`, err.Error())
		assert.NotContains(t, err.Error(), "2.11")
	}
	assert.Equal(t, 5, moved)

	st.afterFenceRead = nil
	require.NoError(t, st.checkFencing(t.Context()), "the key holds still: the leader enforces the fence")
}

// openOnServer opens a store of bucket on an embedded JetStream server of
// its own.
func openOnServer(t *testing.T, bucket string) *Store {
	t.Helper()
	srv := natstest.Start(t, &server.Options{JetStream: true})
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	st, err := Open(t.Context(), nc, Config{Bucket: bucket})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}
