package kvtest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
)

// The suite's reads and writes of one key or prefix: Get, Put, Range, Delete.

func testGetMissing(t *testing.T, s kv.Store) {
	_, err := s.Get(t.Context(), "missing")
	assert.ErrorIs(t, err, kv.ErrNotFound)

	put(t, s, "a/b", "1")
	for _, key := range []string{"a", "a/", "a/b/c", "A/b"} {
		_, err := s.Get(t.Context(), key)
		assert.ErrorIs(t, err, kv.ErrNotFound, "key %q", key)
	}
}

func testPutGet(t *testing.T, s kv.Store) {
	rev := put(t, s, "__flow/state/node/1", `{"state_size":{}}`)

	assert.Equal(t, epoch(t, s), rev.Epoch)
	assert.NotZero(t, rev.Seq)
	e := get(t, s, "__flow/state/node/1")
	assert.Equal(t, kv.Entry{Key: "__flow/state/node/1", Value: []byte(`{"state_size":{}}`), Revision: rev.Seq}, e)
}

func testPutOverwrites(t *testing.T, s kv.Store) {
	first := put(t, s, "k", "a long first value")
	second := put(t, s, "k", "short")

	e := get(t, s, "k")
	assert.Equal(t, "short", string(e.Value))
	assert.Equal(t, second.Seq, e.Revision)
	assert.Greater(t, second.Seq, first.Seq)
	third := put(t, s, "k", "a value longer than any before it")
	assert.Equal(t, "a value longer than any before it", string(get(t, s, "k").Value))
	assert.Equal(t, third.Seq, get(t, s, "k").Revision)
	assert.Equal(t, []string{"k"}, rangeKeys(t, s, ""))
}

func testPutEmptyValue(t *testing.T, s kv.Store) {
	rev, err := s.Put(t.Context(), "empty", nil)
	require.NoError(t, err)

	e := get(t, s, "empty")
	assert.Empty(t, e.Value)
	assert.Equal(t, rev.Seq, e.Revision)
}

func testPutDoesNotRetain(t *testing.T, s kv.Store) {
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

func testGetValueIsCallers(t *testing.T, s kv.Store) {
	put(t, s, "k", "original")

	e := get(t, s, "k")
	copy(e.Value, "mutated!")

	assert.Equal(t, "original", string(get(t, s, "k").Value))
	entries, err := s.Range(t.Context(), "k")
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "original", string(entries[0].Value))
}

func testRangeValueIsCallers(t *testing.T, s kv.Store) {
	put(t, s, "p/a", "aaaa")
	put(t, s, "p/b", "bbbb")

	entries, err := s.Range(t.Context(), "p/")
	require.NoError(t, err)
	require.Len(t, entries, 2)
	for _, e := range entries {
		copy(e.Value, "zzzz")
	}

	assert.Equal(t, "aaaa", string(get(t, s, "p/a").Value))
	assert.Equal(t, "bbbb", string(get(t, s, "p/b").Value))
}

func testRangeOrder(t *testing.T, s kv.Store) {
	// Written out of order, with keys around the prefix that must not match.
	writes := []string{
		"__flow/state/node/2",
		"__flow/state",
		"__flow/state/node/10",
		"__flow/info/1",
		"__flow/state/node/1",
		"__flow/state/nodes",
		"__flow/state/node",
		"__flow/state/node/0",
		"__flow/state/node/1/x",
		"__flow/statf/node/1",
		"x__flow/state/node/9",
		"a",
		"_",
	}
	revs := map[string]uint64{}
	for i, key := range writes {
		revs[key] = put(t, s, key, fmt.Sprintf("v%d", i)).Seq
	}

	entries, err := s.Range(t.Context(), "__flow/state/node/")
	require.NoError(t, err)

	// Ascending byte order of the keys: "10" before "2".
	want := []string{
		"__flow/state/node/0",
		"__flow/state/node/1",
		"__flow/state/node/1/x",
		"__flow/state/node/10",
		"__flow/state/node/2",
	}
	var keys []string
	for _, e := range entries {
		keys = append(keys, e.Key)
		i := slices.Index(writes, e.Key)
		assert.Equal(t, fmt.Sprintf("v%d", i), string(e.Value), "value of %q", e.Key)
		assert.Equal(t, revs[e.Key], e.Revision, "revision of %q", e.Key)
	}
	assert.Equal(t, want, keys)
	assert.Equal(t, []string{"__flow/state", "__flow/state/node", "__flow/state/node/0", "__flow/state/node/1",
		"__flow/state/node/1/x", "__flow/state/node/10", "__flow/state/node/2", "__flow/state/nodes"},
		rangeKeys(t, s, "__flow/state"))
}

func testRangeEmpty(t *testing.T, s kv.Store) {
	assert.Empty(t, rangeKeys(t, s, "__flow/"), "empty store")
	put(t, s, "__flow/state", "x")
	assert.Empty(t, rangeKeys(t, s, "__flow/state/node/"))
	assert.Empty(t, rangeKeys(t, s, "__flow/state/"))
}

func testRangeAll(t *testing.T, s kv.Store) {
	for _, key := range []string{"c", "a/b", "b", "a"} {
		put(t, s, key, key)
	}
	assert.Equal(t, []string{"a", "a/b", "b", "c"}, rangeKeys(t, s, ""))
}

func testDelete(t *testing.T, s kv.Store) {
	put(t, s, "p/a", "a")
	putB := put(t, s, "p/b", "b")

	rev, err := s.Delete(t.Context(), "p/a")
	require.NoError(t, err)

	assert.Greater(t, rev.Seq, putB.Seq)
	assert.Equal(t, epoch(t, s), rev.Epoch)
	_, err = s.Get(t.Context(), "p/a")
	assert.ErrorIs(t, err, kv.ErrNotFound)
	assert.Equal(t, []string{"p/b"}, rangeKeys(t, s, "p/"))
	assert.Equal(t, "b", string(get(t, s, "p/b").Value))

	// A deleted key can be written again.
	again := put(t, s, "p/a", "a2")
	assert.Greater(t, again.Seq, rev.Seq)
	assert.Equal(t, "a2", string(get(t, s, "p/a").Value))
}

func testDeleteMissing(t *testing.T, s kv.Store) {
	_, err := s.Delete(t.Context(), "never-written")
	require.NoError(t, err)

	put(t, s, "k", "v")
	_, err = s.Delete(t.Context(), "k")
	require.NoError(t, err)
	_, err = s.Delete(t.Context(), "k")
	assert.NoError(t, err, "deleting twice")
	assert.Empty(t, rangeKeys(t, s, ""))
}
