package state

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// The buffer a Replica encodes its writes in is reused from one write to
// the next: once the store has the value, it holds no message of it.
func TestReplicaKeepsNoEncodedMessage(t *testing.T) {
	r, err := NewReplica(kv.NewSharedMemory(kv.SharedMemoryOptions{}), ReplicaOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	require.NoError(t, r.WaitLoaded(ctx))
	_, err = r.Merge(ctx, Report{Node: 1, Health: &flowstate.Health{HasLastErrors: true, Flows: []flowstate.FlowHealth{
		{ID: 1, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{{Time: 1, Message: "a secret the node cleared"}}}}}})
	require.NoError(t, err)
	_, err = r.Merge(ctx, Report{Node: 1})
	require.NoError(t, err)
	r.submitMu.Lock()
	held := bytes.Contains(r.enc[:cap(r.enc)], []byte("secret"))
	r.submitMu.Unlock()
	assert.False(t, held, "the encoding buffer holds the cleared message")
	stop()
	require.NoError(t, <-done)
}
