package flowstate_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

func TestNodeKey(t *testing.T) {
	assert.Equal(t, "__flow/state/node/0", flowstate.NodeKey(0))
	assert.Equal(t, "__flow/state/node/42", flowstate.NodeKey(42))
	assert.Equal(t, "__flow/state/node/18446744073709551615", flowstate.NodeKey(math.MaxUint64))
	assert.Equal(t, "__flow/state", flowstate.StateKey)
	assert.Equal(t, "__flow/state/node/", flowstate.NodeKeyPrefix)
}

func TestParseStateKey(t *testing.T) {
	require.NoError(t, flowstate.ParseStateKey([]byte("__flow/state")))

	tests := []struct {
		name string
		key  string
		kind error
	}{
		{"not UTF-8", "__flow/state\xff", flowstate.ErrKeyNotUTF8},
		{"empty", "", flowstate.ErrInvalidKey},
		{"inner key without scope", "state", flowstate.ErrInvalidKey},
		{"other key", "__flow/info/1", flowstate.ErrInvalidKey},
		{"trailing slash", "__flow/state/", flowstate.ErrInvalidKey},
		{"node key", "__flow/state/node/1", flowstate.ErrInvalidKey},
		{"other case", "__flow/STATE", flowstate.ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := flowstate.ParseStateKey([]byte(tt.key))
			assertKeyError(t, err, tt.kind)
		})
	}
}

func TestParseNodeKey(t *testing.T) {
	valid := []struct {
		key  string
		want uint64
	}{
		{"__flow/state/node/0", 0},
		{"__flow/state/node/1", 1},
		{"__flow/state/node/18446744073709551615", math.MaxUint64},
		// Rust's u64::from_str, which the seed uses, takes a '+' and leading
		// zeros.
		{"__flow/state/node/+7", 7},
		{"__flow/state/node/007", 7},
	}
	for _, tt := range valid {
		t.Run(tt.key, func(t *testing.T) {
			id, err := flowstate.ParseNodeKey([]byte(tt.key))
			require.NoError(t, err)
			assert.Equal(t, tt.want, id)
		})
	}
	for _, id := range []uint64{0, 1, 1 << 40, math.MaxUint64} {
		got, err := flowstate.ParseNodeKey([]byte(flowstate.NodeKey(id)))
		require.NoError(t, err)
		assert.Equal(t, id, got, "round trip of NodeKey(%d)", id)
	}

	invalid := []struct {
		name string
		key  string
		kind error
	}{
		{"not UTF-8", "__flow/state/node/\xc3\x28", flowstate.ErrKeyNotUTF8},
		{"not UTF-8 before the prefix", "\xff__flow/state/node/1", flowstate.ErrKeyNotUTF8},
		{"empty", "", flowstate.ErrInvalidKey},
		{"the state key", "__flow/state", flowstate.ErrInvalidKey},
		{"prefix without slash", "__flow/state/node", flowstate.ErrInvalidKey},
		{"inner key without scope", "state/node/1", flowstate.ErrInvalidKey},
		{"other prefix", "__flow/info/node/1", flowstate.ErrInvalidKey},
		{"no node id", "__flow/state/node/", flowstate.ErrInvalidNodeID},
		{"letters", "__flow/state/node/abc", flowstate.ErrInvalidNodeID},
		{"negative", "__flow/state/node/-1", flowstate.ErrInvalidNodeID},
		{"sign only", "__flow/state/node/+", flowstate.ErrInvalidNodeID},
		{"two signs", "__flow/state/node/++1", flowstate.ErrInvalidNodeID},
		{"above uint64", "__flow/state/node/18446744073709551616", flowstate.ErrInvalidNodeID},
		{"trailing slash", "__flow/state/node/1/", flowstate.ErrInvalidNodeID},
		{"space", "__flow/state/node/ 1", flowstate.ErrInvalidNodeID},
		{"underscore", "__flow/state/node/1_000", flowstate.ErrInvalidNodeID},
		{"hex", "__flow/state/node/0x10", flowstate.ErrInvalidNodeID},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			_, err := flowstate.ParseNodeKey([]byte(tt.key))
			assertKeyError(t, err, tt.kind)
		})
	}
}

// assertKeyError checks that err is a *KeyError of kind, and of no other kind.
func assertKeyError(tb testing.TB, err error, kind error) {
	tb.Helper()
	require.Error(tb, err)
	var keyErr *flowstate.KeyError
	require.ErrorAs(tb, err, &keyErr)
	assert.Equal(tb, kind, keyErr.Kind)
	for _, other := range []error{flowstate.ErrKeyNotUTF8, flowstate.ErrInvalidKey, flowstate.ErrInvalidNodeID} {
		assert.Equal(tb, other == kind, errors.Is(err, other), "errors.Is(%v, %v)", err, other)
	}
	assert.Contains(tb, err.Error(), kind.Error())
}
