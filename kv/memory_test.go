package kv_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"flowstate/kv"
	"flowstate/kv/kvtest"
)

func TestMemory(t *testing.T) {
	kvtest.Run(t, func(*testing.T) kv.Store { return kv.NewMemory() })
}

func TestMemoryDump(t *testing.T) {
	m := kv.NewMemory()
	ctx := t.Context()
	assert.Empty(t, m.Dump())

	_, err := m.Put(ctx, "__flow/state/node/1", []byte("one"))
	require.NoError(t, err)
	_, err = m.Put(ctx, "__flow/state", []byte("agg"))
	require.NoError(t, err)
	_, err = m.Put(ctx, "gone", []byte("x"))
	require.NoError(t, err)
	_, err = m.Delete(ctx, "gone")
	require.NoError(t, err)

	dump := m.Dump()
	assert.Equal(t, map[string][]byte{
		"__flow/state/node/1": []byte("one"),
		"__flow/state":        []byte("agg"),
	}, dump)

	// The dump is a copy.
	copy(dump["__flow/state"], "XXX")
	dump["new"] = []byte("y")
	e, err := m.Get(ctx, "__flow/state")
	require.NoError(t, err)
	assert.Equal(t, "agg", string(e.Value))
	assert.NotContains(t, m.Dump(), "new")

	require.NoError(t, m.Clear(ctx))
	assert.Empty(t, m.Dump())
}

func TestNewMemoryEpochsDiffer(t *testing.T) {
	a, err := kv.NewMemory().Epoch(t.Context())
	require.NoError(t, err)
	b, err := kv.NewMemory().Epoch(t.Context())
	require.NoError(t, err)
	assert.NotEqual(t, a, b, "a restarted process must not share an epoch")
}
