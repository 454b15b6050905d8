package kvtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
)

// The suite's reads and writes of one key: Get, Put, Delete.

func testGetMissing(t *testing.T, s Store) {
	_, err := s.Get(t.Context(), "missing")
	assert.ErrorIs(t, err, kv.ErrNotFound)

	put(t, s, "a/b", "1")
	for _, key := range []string{"a", "a/", "a/b/c", "A/b"} {
		_, err := s.Get(t.Context(), key)
		assert.ErrorIs(t, err, kv.ErrNotFound, "key %q", key)
	}
}

func testPutGet(t *testing.T, s Store) {
	rev := put(t, s, "__flow/state/node/1", `{"state_size":{}}`)

	assert.Equal(t, epoch(t, s), rev.Epoch)
	assert.NotZero(t, rev.Seq)
	e := get(t, s, "__flow/state/node/1")
	assert.Equal(t, kv.Entry{Key: "__flow/state/node/1", Value: []byte(`{"state_size":{}}`), Revision: rev.Seq}, e)
}

func testPutOverwrites(t *testing.T, s Store) {
	first := put(t, s, "k", "a long first value")
	second := put(t, s, "k", "short")

	e := get(t, s, "k")
	assert.Equal(t, "short", string(e.Value))
	assert.Equal(t, second.Seq, e.Revision)
	assert.Greater(t, second.Seq, first.Seq)
	third := put(t, s, "k", "a value longer than any before it")
	assert.Equal(t, "a value longer than any before it", string(get(t, s, "k").Value))
	assert.Equal(t, third.Seq, get(t, s, "k").Revision)
	assert.Equal(t, []string{"k"}, present(t, s, "k"))
}

func testPutEmptyValue(t *testing.T, s Store) {
	rev, err := s.Put(t.Context(), "empty", nil)
	require.NoError(t, err)

	e := get(t, s, "empty")
	assert.Empty(t, e.Value)
	assert.Equal(t, rev.Seq, e.Revision)
}

func testPutDoesNotRetain(t *testing.T, s Store) {
	value := []byte("original")
	put1, err := s.Put(t.Context(), "k", value)
	require.NoError(t, err)
	copy(value, "mutated!")
	assert.Equal(t, "original", string(get(t, s, "k").Value), "after mutating the slice of the first put")

	// An overwrite too (an implementation may reuse the stored buffer).
	value = []byte("second")
	_, err = s.Put(t.Context(), "k", value)
	require.NoError(t, err)
	copy(value, "XXXXXX")
	assert.Equal(t, "second", string(get(t, s, "k").Value), "after mutating the slice of the overwrite")
	assert.NotZero(t, put1.Seq)
}

func testGetValueIsCallers(t *testing.T, s Store) {
	put(t, s, "k", "original")

	e := get(t, s, "k")
	copy(e.Value, "mutated!")

	assert.Equal(t, "original", string(get(t, s, "k").Value))
}

func testDelete(t *testing.T, s Store) {
	put(t, s, "p/a", "a")
	putB := put(t, s, "p/b", "b")

	rev, err := s.Delete(t.Context(), "p/a")
	require.NoError(t, err)

	assert.Greater(t, rev.Seq, putB.Seq)
	assert.Equal(t, epoch(t, s), rev.Epoch)
	_, err = s.Get(t.Context(), "p/a")
	assert.ErrorIs(t, err, kv.ErrNotFound)
	assert.Equal(t, []string{"p/b"}, present(t, s, "p/a", "p/b"))
	assert.Equal(t, "b", string(get(t, s, "p/b").Value))

	// A deleted key can be written again.
	again := put(t, s, "p/a", "a2")
	assert.Greater(t, again.Seq, rev.Seq)
	assert.Equal(t, "a2", string(get(t, s, "p/a").Value))
}

func testDeleteMissing(t *testing.T, s Store) {
	_, err := s.Delete(t.Context(), "never-written")
	require.NoError(t, err)

	put(t, s, "k", "v")
	_, err = s.Delete(t.Context(), "k")
	require.NoError(t, err)
	_, err = s.Delete(t.Context(), "k")
	assert.NoError(t, err, "deleting twice")
	assert.Empty(t, present(t, s, "never-written", "k"))
}
