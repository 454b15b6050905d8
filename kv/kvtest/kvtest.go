package kvtest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
)

// Store is a kv.Store that the suite can wipe, as an operator who purges a
// bucket does (Clear: every key removed, a new epoch).
type Store interface {
	kv.Store
	Clear(ctx context.Context) error
}

// Run runs the contract suite against stores made by newStore, one new and
// empty store per subtest. newStore should register any cleanup with
// t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	runSuite(t, newStore, []subtest[Store]{
		{"GetMissingKeyReturnsErrNotFound", testGetMissing},
		{"PutThenGetReturnsValueAndRevision", testPutGet},
		{"PutOverwritesValue", testPutOverwrites},
		{"PutEmptyValue", testPutEmptyValue},
		{"PutDoesNotRetainValue", testPutDoesNotRetain},
		{"GetValueIsCallersToKeep", testGetValueIsCallers},
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

// present returns those of keys that the store holds, in their order.
func present(tb testing.TB, s kv.Store, keys ...string) []string {
	tb.Helper()
	held := []string{}
	for _, key := range keys {
		_, err := s.Get(tb.Context(), key)
		if errors.Is(err, kv.ErrNotFound) {
			continue
		}
		require.NoError(tb, err, "get %q", key)
		held = append(held, key)
	}
	return held
}
