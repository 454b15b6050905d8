package kv_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/kv/kvtest"
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

// bytesValue is a Renderer of fixed bytes.
type bytesValue []byte

func (b bytesValue) AppendValue(dst []byte) []byte { return append(dst, b...) }

// lazyMemory is a Store whose Put writes through PutLazy, so that the
// contract suite runs on values rendered when read.
type lazyMemory struct{ *kv.Memory }

func (l lazyMemory) Put(ctx context.Context, key string, value []byte) (kv.Revision, error) {
	return l.PutLazy(ctx, key, bytesValue(bytes.Clone(value)))
}

func TestMemoryPutLazyContract(t *testing.T) {
	kvtest.Run(t, func(*testing.T) kv.Store { return lazyMemory{kv.NewMemory()} })
}

// countingValue renders its bytes and counts the renders.
type countingValue struct {
	b       []byte
	renders atomic.Int64
}

func (c *countingValue) AppendValue(dst []byte) []byte {
	c.renders.Add(1)
	return append(dst, c.b...)
}

func TestMemoryPutLazyRendersOnlyWhenRead(t *testing.T) {
	m := kv.NewMemory()
	ctx := t.Context()
	v := &countingValue{b: []byte("lazy")}
	rev, err := m.PutLazy(ctx, "k", v)
	require.NoError(t, err)
	assert.Zero(t, v.renders.Load(), "a write renders nothing")

	e, err := m.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, kv.Entry{Key: "k", Value: []byte("lazy"), Revision: rev.Seq}, e)
	entries, err := m.Range(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []kv.Entry{{Key: "k", Value: []byte("lazy"), Revision: rev.Seq}}, entries)
	assert.Equal(t, map[string][]byte{"k": []byte("lazy")}, m.Dump())
	assert.Equal(t, int64(3), v.renders.Load(), "one render per read")

	// A plain write replaces the lazy value, and a lazy one a plain value.
	plain, err := m.Put(ctx, "k", []byte("plain"))
	require.NoError(t, err)
	assert.Greater(t, plain.Seq, rev.Seq)
	e, err = m.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "plain", string(e.Value))
	assert.Equal(t, int64(3), v.renders.Load(), "the replaced value is not rendered")
	_, err = m.PutLazy(ctx, "k", bytesValue("again"))
	require.NoError(t, err)
	e, err = m.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "again", string(e.Value))

	_, err = m.Delete(ctx, "k")
	require.NoError(t, err)
	_, err = m.Get(ctx, "k")
	require.ErrorIs(t, err, kv.ErrNotFound)
}

func TestMemoryPutLazyOverwriteDoesNotAllocate(t *testing.T) {
	m := kv.NewMemory()
	ctx := t.Context()
	a, b := bytesValue("a"), bytesValue("b")
	pa, pb := &a, &b
	_, err := m.PutLazy(ctx, "k", pa)
	require.NoError(t, err)
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		i++
		v := pa
		if i%2 == 1 {
			v = pb
		}
		_, _ = m.PutLazy(ctx, "k", v)
	})
	assert.Zero(t, allocs)
}

// flipValue is a Renderer whose bytes its writer changes in place while the
// store does not hold it.
type flipValue struct{ digits []byte }

func (f *flipValue) AppendValue(dst []byte) []byte { return append(dst, f.digits...) }

// TestMemoryPutLazyDoubleBuffered writes one key from two Renderers in turn,
// changing the one that the store does not hold, while readers read the
// key: every read sees a value that was written whole (and, under -race, no
// data race).
func TestMemoryPutLazyDoubleBuffered(t *testing.T) {
	m := kv.NewMemory()
	ctx := t.Context()
	var vals [2]flipValue
	const writes = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				e, err := m.Get(ctx, "k")
				if errors.Is(err, kv.ErrNotFound) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				// Every value is one digit repeated 8 times.
				if !assert.Len(t, e.Value, 8) || !assert.Equal(t, strings.Repeat(string(e.Value[0]), 8), string(e.Value)) {
					return
				}
			}
		})
	}
	for i := range writes {
		v := &vals[i%2]
		v.digits = append(v.digits[:0], strings.Repeat(strconv.Itoa(i%10), 8)...)
		_, err := m.PutLazy(ctx, "k", v)
		require.NoError(t, err)
	}
	close(done)
	wg.Wait()
}
