package jetstream

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
)

// TestKnownWritesTellAnotherWriteAtARecordedRevision: the record tells
// another write at a sequence number it holds, not the same one again;
// a new epoch starts it over; past maxKnownWrites it forgets the oldest,
// and its top stays the highest recorded.
func TestKnownWritesTellAnotherWriteAtARecordedRevision(t *testing.T) {
	k := newKnownWrites()
	a, b := k.hash("$KV.b.k1", []byte("one")), k.hash("$KV.b.k2", []byte("one"))
	assert.NotEqual(t, a, b, "the subject is part of a write")
	assert.NotEqual(t, a, k.hash("$KV.b.k1", []byte("two")), "so is its data")
	assert.NotEqual(t, k.hash("$KV.b.k", []byte("1one")), a, "subject and data do not run together")

	assert.False(t, k.note("e1", 5, a), "first seen")
	assert.False(t, k.note("e1", 5, a), "the same write again (its acknowledgement, then the watch's delivery)")
	assert.True(t, k.note("e1", 5, b), "another write at 5 in the same epoch")
	assert.True(t, k.note("e1", 5, b), "the first one is kept")
	assert.Equal(t, uint64(5), k.topOf("e1"))
	assert.Zero(t, k.topOf("e2"))
	assert.False(t, k.note("", 6, a), "no epoch: nothing recorded")
	assert.False(t, k.note("e1", 0, a), "no sequence number: nothing recorded")

	assert.False(t, k.note("e2", 5, b), "a new epoch starts the record over")
	assert.Zero(t, k.topOf("e1"))
	assert.Equal(t, uint64(5), k.topOf("e2"))

	for seq := uint64(6); seq < 6+maxKnownWrites; seq++ {
		assert.False(t, k.note("e2", seq, a))
	}
	assert.False(t, k.note("e2", 5, a), "the oldest was forgotten (bounded): no longer told apart")
	assert.True(t, k.note("e2", 6+maxKnownWrites-1, b), "the latest are kept")
	assert.Equal(t, uint64(6+maxKnownWrites-1), k.topOf("e2"))
}

// TestKnownWritesTellAWriteNumberedAtOrBelowTheRecord: a write sent once
// the record's top was t and numbered at or below t is a stream that
// forgot; numbered past it, or with nothing recorded, or in another epoch,
// it is not. The watch takes what was found once, in its epoch.
func TestKnownWritesTellAWriteNumberedAtOrBelowTheRecord(t *testing.T) {
	k := newKnownWrites()
	h := k.hash("$KV.b.k1", []byte("one"))
	assert.NoError(t, k.numbered("e1", 0, 3, "a put", ""), "nothing recorded")
	k.note("e1", 10, h)
	top := k.topOf("e1")
	assert.NoError(t, k.numbered("e1", top, 11, "a put", ""), "numbered after the record")
	assert.NoError(t, k.numbered("e2", top, 9, "a put", ""), "another epoch than the record's")
	assert.Empty(t, k.takeLost("e1"))

	err := k.numbered("e1", top, 10, "a put", "")
	require.ErrorIs(t, err, kv.ErrUnavailable, "numbered at the top")
	assert.EqualError(t, err, "kv: store unavailable: the stream numbers a put 10, at or below revision 10 that it acknowledged or delivered to this worker: it forgot that one")
	assert.Error(t, k.numbered("e1", top, 4, "a read barrier", ""), "numbered below it")
	assert.Equal(t, "the stream numbers a read barrier 4, at or below revision 10 that it acknowledged or delivered to this worker", k.takeLost("e1"))
	assert.Empty(t, k.takeLost("e1"), "taken once")
	assert.Error(t, k.numbered("e1", top, 5, "a put", ""))
	assert.Empty(t, k.takeLost("e2"), "what was found in e1 does not end e2")
	assert.Empty(t, k.takeLost("e1"))
}

// TestReadBarrierAtARevisionThatHeldAnotherWriteIsUnavailable: a read
// barrier the stream numbers where it acknowledged or delivered another
// write to this store forgot that write, so no state is answered as of it;
// the barrier it numbers next, past the record, passes.
func TestReadBarrierAtARevisionThatHeldAnotherWriteIsUnavailable(t *testing.T) {
	st := openOnServer(t, "barrier_known")
	epoch, err := st.Epoch(t.Context())
	require.NoError(t, err)
	info, err := st.handles().stream.Info(t.Context())
	require.NoError(t, err)

	next := info.State.LastSeq + 1
	st.known.note(epoch, next, st.known.hash(st.subject("node.7"), []byte("lost")))
	_, err = st.LastRevision(t.Context())
	require.ErrorIs(t, err, kv.ErrUnavailable)
	assert.ErrorContains(t, err, fmt.Sprintf("barrier %d", next))

	rev, err := st.LastRevision(t.Context())
	require.NoError(t, err, "the next barrier is past what was recorded")
	assert.Equal(t, kv.Revision{Epoch: epoch, Seq: next + 1}, rev)
}
