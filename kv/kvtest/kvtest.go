package kvtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
)

// Run runs the contract suite against stores made by newStore, one new and
// empty store per subtest. newStore should register any cleanup with
// t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) kv.Store) {
	runSuite(t, newStore, []subtest[kv.Store]{
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
	})
}

// subtest is one contract test against a store of type S.
type subtest[S any] struct {
	name string
	test func(t *testing.T, s S)
}

// runSuite runs each test as a subtest on a new store made by newStore.
func runSuite[S any](t *testing.T, newStore func(t *testing.T) S, tests []subtest[S]) {
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
