package kvtest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
)

// Revisions and epochs: what a write returns, and what Clear changes.

func testRevisionsIncrease(t *testing.T, s Store) {
	var last uint64
	e := epoch(t, s)
	check := func(op string, rev kv.Revision) {
		t.Helper()
		assert.Greater(t, rev.Seq, last, op)
		assert.Equal(t, e, rev.Epoch, op)
		last = rev.Seq
	}
	for i := range 20 {
		key := fmt.Sprintf("k%d", i%3)
		check("put "+key, put(t, s, key, fmt.Sprint(i)))
		assert.Equal(t, last, get(t, s, key).Revision, "get %s", key)
		if i%4 == 0 {
			rev, err := s.Delete(t.Context(), key)
			require.NoError(t, err)
			check("delete "+key, rev)
		}
		if i%5 == 0 {
			rev, err := s.Delete(t.Context(), "missing")
			require.NoError(t, err)
			if rev.Seq != 0 { // a store may give no revision to a no-op
				check("delete missing", rev)
			}
		}
	}
}

func testEpochStable(t *testing.T, s Store) {
	e := epoch(t, s)
	assert.NotEmpty(t, e)

	put(t, s, "a", "1")
	_, err := s.Delete(t.Context(), "a")
	require.NoError(t, err)
	put(t, s, "b", "2")

	assert.Equal(t, e, epoch(t, s))
	assert.Equal(t, e, put(t, s, "c", "3").Epoch)
}

func testClear(t *testing.T, s Store) {
	before := epoch(t, s)
	for _, key := range []string{"__flow/state", "__flow/state/node/1", "other"} {
		put(t, s, key, "v")
	}

	require.NoError(t, s.Clear(t.Context()))

	after := epoch(t, s)
	assert.NotEmpty(t, after)
	assert.NotEqual(t, before, after)
	for _, key := range []string{"__flow/state", "__flow/state/node/1", "other"} {
		_, err := s.Get(t.Context(), key)
		assert.ErrorIs(t, err, kv.ErrNotFound, "key %q", key)
	}

	// The store works in the new epoch, and its writes carry it.
	first := put(t, s, "__flow/state/node/2", "w")
	assert.Equal(t, after, first.Epoch)
	second := put(t, s, "__flow/state/node/3", "w")
	assert.Greater(t, second.Seq, first.Seq)
	assert.Equal(t, []string{"__flow/state/node/2", "__flow/state/node/3"},
		present(t, s, "__flow/state", "__flow/state/node/1", "__flow/state/node/2", "__flow/state/node/3", "other"))
	assert.Equal(t, second.Seq, get(t, s, "__flow/state/node/3").Revision)

	// Clearing again starts yet another epoch.
	require.NoError(t, s.Clear(t.Context()))
	again := epoch(t, s)
	assert.NotEqual(t, after, again)
	assert.NotEqual(t, before, again)
	assert.Empty(t, present(t, s, "__flow/state/node/2", "__flow/state/node/3"))
	assert.Equal(t, again, epoch(t, s), "stable after the clear")
}
