// Package kvtest is the contract test of kv.Store (Run) and of kv.Shared
// (RunShared): every implementation runs the same suites, so that the flow
// state manager, a replica and the publisher lease can rely on what package
// kv documents whatever holds the keys. Recorder follows a kv.Watcher in
// tests.
//
// Keys used by the suite are made of letters, digits, '_', '-', '/' and '.'
// only, which every planned backend (a NATS JetStream key-value bucket
// included) accepts.
package kvtest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"flowstate/kv"
)

// Run runs the contract suite against stores made by newStore, one new and
// empty store per subtest. newStore should register any cleanup with
// t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) kv.Store) {
	tests := []struct {
		name string
		test func(t *testing.T, s kv.Store)
	}{
		{"GetMissingKeyReturnsErrNotFound", testGetMissing},
		{"PutThenGetReturnsValueAndRevision", testPutGet},
		{"PutOverwritesValue", testPutOverwrites},
		{"PutEmptyValue", testPutEmptyValue},
		{"PutDoesNotRetainValue", testPutDoesNotRetain},
		{"GetValueIsCallersToKeep", testGetValueIsCallers},
		{"RangeValueIsCallersToKeep", testRangeValueIsCallers},
		{"RangeReturnsPrefixInAscendingKeyOrder", testRangeOrder},
		{"RangeWithoutMatchReturnsNothing", testRangeEmpty},
		{"RangeWithEmptyPrefixReturnsEveryKey", testRangeAll},
		{"DeleteRemovesKey", testDelete},
		{"DeleteMissingKeyIsNotAnError", testDeleteMissing},
		{"RevisionsStrictlyIncreaseAcrossWrites", testRevisionsIncrease},
		{"EpochIsNonEmptyAndStableWithoutClear", testEpochStable},
		{"ClearRemovesEveryKeyAndChangesEpoch", testClear},
		{"ConcurrentUse", testConcurrent},
		{"ConcurrentUseWithClear", testConcurrentClear},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			require.NotNil(t, s)
			tt.test(t, s)
		})
	}
}

func put(tb testing.TB, s kv.Store, key, value string) kv.Revision {
	tb.Helper()
	rev, err := s.Put(tb.Context(), key, []byte(value))
	require.NoError(tb, err, "put %q", key)
	return rev
}

func get(tb testing.TB, s kv.Store, key string) kv.Entry {
	tb.Helper()
	e, err := s.Get(tb.Context(), key)
	require.NoError(tb, err, "get %q", key)
	return e
}

func epoch(tb testing.TB, s kv.Store) string {
	tb.Helper()
	e, err := s.Epoch(tb.Context())
	require.NoError(tb, err)
	return e
}

func rangeKeys(tb testing.TB, s kv.Store, prefix string) []string {
	tb.Helper()
	entries, err := s.Range(tb.Context(), prefix)
	require.NoError(tb, err, "range %q", prefix)
	keys := []string{}
	for _, e := range entries {
		keys = append(keys, e.Key)
	}
	return keys
}

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

func testRevisionsIncrease(t *testing.T, s kv.Store) {
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

func testEpochStable(t *testing.T, s kv.Store) {
	e := epoch(t, s)
	assert.NotEmpty(t, e)

	put(t, s, "a", "1")
	_, err := s.Delete(t.Context(), "a")
	require.NoError(t, err)
	put(t, s, "b", "2")
	_, err = s.Range(t.Context(), "")
	require.NoError(t, err)

	assert.Equal(t, e, epoch(t, s))
	assert.Equal(t, e, put(t, s, "c", "3").Epoch)
}

func testClear(t *testing.T, s kv.Store) {
	before := epoch(t, s)
	for _, key := range []string{"__flow/state", "__flow/state/node/1", "other"} {
		put(t, s, key, "v")
	}

	require.NoError(t, s.Clear(t.Context()))

	after := epoch(t, s)
	assert.NotEmpty(t, after)
	assert.NotEqual(t, before, after)
	assert.Empty(t, rangeKeys(t, s, ""))
	for _, key := range []string{"__flow/state", "__flow/state/node/1", "other"} {
		_, err := s.Get(t.Context(), key)
		assert.ErrorIs(t, err, kv.ErrNotFound, "key %q", key)
	}

	// The store works in the new epoch, and its writes carry it.
	first := put(t, s, "__flow/state/node/2", "w")
	assert.Equal(t, after, first.Epoch)
	second := put(t, s, "__flow/state/node/3", "w")
	assert.Greater(t, second.Seq, first.Seq)
	assert.Equal(t, []string{"__flow/state/node/2", "__flow/state/node/3"}, rangeKeys(t, s, "__flow/"))
	assert.Equal(t, second.Seq, get(t, s, "__flow/state/node/3").Revision)

	// Clearing again starts yet another epoch.
	require.NoError(t, s.Clear(t.Context()))
	again := epoch(t, s)
	assert.NotEqual(t, after, again)
	assert.NotEqual(t, before, again)
	assert.Empty(t, rangeKeys(t, s, ""))
	assert.Equal(t, again, epoch(t, s), "stable after the clear")
}

// testConcurrent has goroutines write, read, range and delete their own keys
// at once; every write's sequence number must be unique, each goroutine's
// must grow, and the end state must be exactly what they wrote.
func testConcurrent(t *testing.T, s kv.Store) {
	const (
		workers = 8
		rounds  = 50
	)
	ctx := t.Context()
	e := epoch(t, s)
	seqs := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			prefix := fmt.Sprintf("w%d/", w)
			for i := range rounds {
				key := fmt.Sprintf("%sk%d", prefix, i%5)
				rev, err := s.Put(ctx, key, []byte(fmt.Sprint(i)))
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, e, rev.Epoch)
				seqs[w] = append(seqs[w], rev.Seq)
				got, err := s.Get(ctx, key)
				if assert.NoError(t, err) {
					assert.Equal(t, fmt.Sprint(i), string(got.Value), "only this goroutine writes %s", key)
				}
				entries, err := s.Range(ctx, prefix)
				if assert.NoError(t, err) {
					assert.True(t, slices.IsSortedFunc(entries, func(a, b kv.Entry) int { return strings.Compare(a.Key, b.Key) }))
				}
				if _, err := s.Epoch(ctx); !assert.NoError(t, err) {
					return
				}
				if i%7 == 0 {
					rev, err := s.Delete(ctx, key)
					if assert.NoError(t, err) {
						seqs[w] = append(seqs[w], rev.Seq)
					}
				}
			}
		})
	}
	wg.Wait()

	var all []uint64
	for w := range workers {
		assert.True(t, slices.IsSorted(seqs[w]), "sequence numbers of goroutine %d: %v", w, seqs[w])
		all = append(all, seqs[w]...)
	}
	slices.Sort(all)
	assert.Len(t, slices.Compact(slices.Clone(all)), len(all), "every write has its own sequence number")

	// Each goroutine's last write of k0..k4 is what is stored.
	for w := range workers {
		want := map[string]string{}
		for i := range rounds {
			key := fmt.Sprintf("w%d/k%d", w, i%5)
			want[key] = fmt.Sprint(i)
			if i%7 == 0 {
				delete(want, key)
			}
		}
		entries, err := s.Range(ctx, fmt.Sprintf("w%d/", w))
		require.NoError(t, err)
		got := map[string]string{}
		for _, e := range entries {
			got[e.Key] = string(e.Value)
		}
		assert.Equal(t, want, got, "keys of goroutine %d", w)
	}
}

// testConcurrentClear clears the store while other goroutines use it: no
// call may fail, and every write carries an epoch that the store had.
func testConcurrentClear(t *testing.T, s kv.Store) {
	ctx := t.Context()
	var (
		mu     sync.Mutex
		epochs = map[string]bool{epoch(t, s): true}
	)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 10 {
			if !assert.NoError(t, s.Clear(ctx)) {
				return
			}
			e, err := s.Epoch(ctx)
			if assert.NoError(t, err) {
				mu.Lock()
				epochs[e] = true
				mu.Unlock()
			}
		}
	})
	var writes []kv.Revision
	var wmu sync.Mutex
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				key := fmt.Sprintf("w%d/k%d", w, i%3)
				rev, err := s.Put(ctx, key, []byte("v"))
				if !assert.NoError(t, err) {
					return
				}
				wmu.Lock()
				writes = append(writes, rev)
				wmu.Unlock()
				_, err = s.Get(ctx, key)
				if err != nil && !errors.Is(err, kv.ErrNotFound) { // a clear may remove it
					assert.NoError(t, err)
				}
				_, err = s.Range(ctx, "w")
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()

	for _, rev := range writes {
		assert.True(t, epochs[rev.Epoch], "write at unknown epoch %q", rev.Epoch)
	}
	last := epoch(t, s)
	assert.True(t, epochs[last])
	assert.Equal(t, last, put(t, s, "after", "v").Epoch)
}
