package kvtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
)

// AsyncShared is a Shared store whose puts do not wait (kv.AsyncPutter).
type AsyncShared interface {
	Shared
	kv.AsyncPutter
}

// RunAsync runs the contract suite of kv.AsyncPutter against stores made by
// newStore, one new and empty store per subtest: conditional puts refused
// as conditional writes are, and puts stored in the order of the calls.
// newStore should register any cleanup with t.Cleanup.
func RunAsync(t *testing.T, newStore func(t *testing.T) AsyncShared) {
	runSuite(t, newStore, []subtest[AsyncShared]{
		{"ConditionalPutHoldsOnTheLastWriteOfItsKey", testAsyncConditional},
		{"PutsAreStoredInCallOrder", testAsyncOrder},
	})
}

// putAsync sends a put and waits (at most Wait) for its answer.
func putAsync(tb testing.TB, s kv.AsyncPutter, key, value string, cond kv.Condition) (kv.Revision, error) {
	tb.Helper()
	type answer struct {
		rev kv.Revision
		err error
	}
	got := make(chan answer, 1)
	if err := s.PutAsync(tb.Context(), key, []byte(value), cond, kv.PutFunc(func(rev kv.Revision, err error) { got <- answer{rev, err} })); err != nil {
		return kv.Revision{}, err
	}
	select {
	case a := <-got:
		return a.rev, a.err
	case <-time.After(Wait):
		tb.Fatalf("put %s not answered within %v", key, Wait)
		return kv.Revision{}, nil
	}
}

func testAsyncConditional(t *testing.T, s AsyncShared) {
	ctx := t.Context()
	k := prefix + "node"
	cond := func(rev uint64) kv.Condition { return kv.Condition{Key: k, Revision: rev} }
	first, err := putAsync(t, s, k, "a", cond(0))
	require.NoError(t, err, "a key never written: its last write is 0")
	assert.Equal(t, epoch(t, s), first.Epoch)
	_, err = putAsync(t, s, k, "b", cond(0))
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	assert.NotErrorIs(t, err, kv.ErrUnavailable, "a refusal is known not to be stored")
	last, ok := kv.LastWriteOf(err)
	assert.True(t, ok && last == first.Seq, "the refusal names the key's last write, %d: %d (%t)", first.Seq, last, ok)
	assert.Equal(t, kv.Entry{Key: k, Value: []byte("a"), Revision: first.Seq}, get(t, s, k))

	second, err := putAsync(t, s, k, "c", cond(first.Seq))
	require.NoError(t, err)
	assert.Equal(t, first.Seq+1, second.Seq, "a refused put takes no sequence number")
	del, err := s.Delete(ctx, k)
	require.NoError(t, err)
	_, err = putAsync(t, s, k, "d", cond(second.Seq))
	require.ErrorIs(t, err, kv.ErrRevisionMismatch, "the deletion is the key's last write")
	last, ok = kv.LastWriteOf(err)
	assert.True(t, ok && last == del.Seq, "the refusal names the deletion, %d: %d (%t)", del.Seq, last, ok)
	third, err := putAsync(t, s, k, "d", cond(del.Seq))
	require.NoError(t, err)
	assert.Equal(t, kv.Entry{Key: k, Value: []byte("d"), Revision: third.Seq}, get(t, s, k))

	// Fenced on another key.
	other := prefix + "other"
	_, err = putAsync(t, s, other, "x", kv.Condition{Key: k, Revision: second.Seq})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	_, err = putAsync(t, s, other, "x", kv.Condition{Key: k, Revision: third.Seq})
	require.NoError(t, err)

	require.NoError(t, s.Clear(ctx))
	_, err = putAsync(t, s, k, "e", cond(third.Seq))
	require.ErrorIs(t, err, kv.ErrRevisionMismatch, "conditioned on a write the clear wiped")
	_, err = putAsync(t, s, k, "e", cond(0))
	require.NoError(t, err, "every key is unwritten after a clear")
}

// testAsyncOrder sends puts without waiting, some of them conditioned on
// the previous put of their key by the revision it will get: they are
// stored in the order of the calls, so each condition holds.
func testAsyncOrder(t *testing.T, s AsyncShared) {
	const n, keys = 40, 3
	type answer struct {
		rev kv.Revision
		err error
	}
	answers := make([]chan answer, n)
	for i := range n {
		answers[i] = make(chan answer, 1)
		key := fmt.Sprintf("%sk%d", prefix, i%keys)
		err := s.PutAsync(t.Context(), key, []byte(fmt.Sprint(i)), kv.NoCondition, kv.PutFunc(func(rev kv.Revision, err error) {
			answers[i] <- answer{rev, err}
		}))
		require.NoError(t, err)
	}
	var last uint64
	for i := range n {
		select {
		case a := <-answers[i]:
			require.NoError(t, a.err, "put %d", i)
			assert.Greater(t, a.rev.Seq, last, "put %d is stored after the one sent before it", i)
			last = a.rev.Seq
		case <-time.After(Wait):
			t.Fatalf("put %d not answered within %v", i, Wait)
		}
	}
	for k := range keys {
		lastOfKey := n - 1 - (n-1-k)%keys
		assert.Equal(t, fmt.Sprint(lastOfKey), string(get(t, s, fmt.Sprintf("%sk%d", prefix, k)).Value))
	}
}
