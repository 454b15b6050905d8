package kvtest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
)

// testConcurrent has goroutines write, read, range and delete their own keys
// at once; every write's sequence number must be unique, each goroutine's
// must grow, and the end state must be exactly what they wrote.
func testConcurrent(t *testing.T, s Store) {
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
		got := map[string]string{}
		for k := range 5 {
			key := fmt.Sprintf("w%d/k%d", w, k)
			e, err := s.Get(ctx, key)
			if errors.Is(err, kv.ErrNotFound) {
				continue
			}
			require.NoError(t, err)
			got[key] = string(e.Value)
		}
		assert.Equal(t, want, got, "keys of goroutine %d", w)
	}
}

// testConcurrentClear clears the store while other goroutines use it: no
// call may fail, and every write carries an epoch that the store had.
func testConcurrentClear(t *testing.T, s Store) {
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
