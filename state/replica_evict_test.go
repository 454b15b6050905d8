package state_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// deletesTogether is an in-memory store whose deletions of node keys each
// wait, up to followWait, until another one is in flight: deletions sent
// one after the other each wait it out.
type deletesTogether struct {
	*kv.SharedMemory
	mu       sync.Mutex
	inFlight int
	most     int           // the most node deletions in flight at once
	two      chan struct{} // closed once two were in flight at once
}

func (s *deletesTogether) DeleteIf(ctx context.Context, key string, cond kv.Condition) (kv.Revision, error) {
	if !strings.HasPrefix(key, flowstate.NodeKeyPrefix) {
		return s.SharedMemory.DeleteIf(ctx, key, cond)
	}
	s.mu.Lock()
	s.inFlight++
	if s.inFlight == 2 && s.most < 2 {
		close(s.two)
	}
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	t := time.NewTimer(followWait)
	defer t.Stop()
	select {
	case <-s.two:
	case <-ctx.Done():
	case <-t.C:
	}
	return s.SharedMemory.DeleteIf(ctx, key, cond)
}

// TestReplicaEvictsSilentNodesWithTheirDeletionsInFlightTogether: the
// publisher's evictions of many silent nodes do not cost one round trip to
// the store each, in series.
func TestReplicaEvictsSilentNodesWithTheirDeletionsInFlightTogether(t *testing.T) {
	store := &deletesTogether{SharedMemory: kv.NewSharedMemory(kv.SharedMemoryOptions{}), two: make(chan struct{})}
	w := follow(t, store, state.ReplicaOptions{})
	for node := uint64(1); node <= 3; node++ {
		fmerge(t, w.mgr, node, lastExecOf(node, flowstate.FlowID(node)))
	}
	require.Eventually(t, w.mgr.Publisher, followWait, 5*time.Millisecond)

	ctx, cancel := context.WithTimeout(t.Context(), followWait/2)
	defer cancel()
	evicted, res, err := w.mgr.EvictSilent(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	slices.Sort(evicted)
	assert.Equal(t, []uint64{1, 2, 3}, evicted)
	assert.True(t, res.Changed)
	store.mu.Lock()
	defer store.mu.Unlock()
	assert.GreaterOrEqual(t, store.most, 2, "node deletions in flight at once")
	v, _ := w.synced(t)
	assert.True(t, isEmpty(v), "every silent node is gone: %v", v)
}
