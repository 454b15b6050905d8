package state

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// TestWriteMovesOnlyAsItsLifecycleSays walks every pair of phases: a move
// the table lists happens, any other panics and leaves the phase as it
// was.
func TestWriteMovesOnlyAsItsLifecycleSays(t *testing.T) {
	for from := free; from <= abandoned; from++ {
		for to := free; to <= abandoned; to++ {
			legal := false
			for _, p := range moves[from] {
				legal = legal || p == to
			}
			e := &write{phase: from}
			if legal {
				e.to(to)
				assert.Equal(t, to, e.phase, "%s to %s", from, to)
				continue
			}
			assert.Panics(t, func() { e.to(to) }, "%s to %s is not a move of the lifecycle", from, to)
			assert.Equal(t, from, e.phase)
		}
	}
}

// TestEveryPhaseIsReachableAndEndsFree: from queued, every phase can be
// reached, and from each one a write can be reused (free): no phase is a
// dead end.
func TestEveryPhaseIsReachableAndEndsFree(t *testing.T) {
	reach := func(from writePhase) map[writePhase]bool {
		seen := map[writePhase]bool{from: true}
		for todo := []writePhase{from}; len(todo) > 0; {
			p := todo[0]
			todo = todo[1:]
			for _, q := range moves[p] {
				if !seen[q] {
					seen[q] = true
					todo = append(todo, q)
				}
			}
		}
		return seen
	}
	fromQueued := reach(queued)
	for p := free; p <= abandoned; p++ {
		assert.True(t, fromQueued[p], "%s is reachable", p)
		require.True(t, reach(p)[free], "%s ends free", p)
	}
}

// TestARefusalThatNamesNoWriteWaitsForAnyLaterOne: a replicated stream
// refuses a condition without naming the key's last write; the write then
// waits for any write of the key past its condition.
func TestARefusalThatNamesNoWriteWaitsForAnyLaterOne(t *testing.T) {
	r, err := NewReplica(nil, ReplicaOptions{})
	require.NoError(t, err)
	r.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
	r.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1"}, Exact: true})
	r.mu.Lock()
	defer r.mu.Unlock()
	e := &write{r: r, phase: sent, node: 1, epoch: "e1", cond: 41}
	assert.False(t, r.overtakeLocked(e, errors.New("some other error")), "only a refused condition")
	refused := fmt.Errorf("%w: wrong last sequence", kv.ErrRevisionMismatch)
	require.True(t, r.overtakeLocked(e, refused))
	assert.Equal(t, overtaken, e.phase)
	assert.Equal(t, uint64(42), e.waitFor, "any write past the condition")

	e = &write{r: r, phase: sent, node: 1, epoch: "e1", cond: 41}
	require.True(t, r.overtakeLocked(e, &kv.MismatchError{Last: 57, Err: refused}))
	assert.Equal(t, uint64(57), e.waitFor, "the write the refusal names")
}

// TestAChainedWriteIsJudgedByALaterWriteOfItsNodeThanTheOneBefore: a
// write chained after this worker's write of its node, which the store
// took at 10, is sent once that one is answered. If the watch has applied
// a write of the node stored after it (another worker's, at 20), the
// chained write replaces that one: judged against it, it is refused if
// stale (an older seq of the same process), and else sent conditioned on
// it.
func TestAChainedWriteIsJudgedByALaterWriteOfItsNodeThanTheOneBefore(t *testing.T) {
	for _, c := range []struct {
		name     string
		laterSeq uint64 // the seq of the report written at 20
		stale    bool
	}{
		{"a later report of the process at 20", 3, true},
		{"an earlier report of the process at 20", 1, false},
	} {
		r, err := NewReplica(nil, ReplicaOptions{})
		require.NoError(t, err)
		r.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
		r.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1"}, Exact: true})
		flows := []flowstate.Flow{{ID: 1, Has: flowstate.HasLastExecTime, LastExecTime: 1}}
		r.onEvent(kv.Event{Op: kv.OpPut, Key: flowstate.NodeKey(1), Revision: kv.Revision{Epoch: "e1", Seq: 20}, Exact: true,
			Value: flowstate.AppendNodeJSON(nil, flows, 100, true, &flowstate.Health{Seq: c.laterSeq, HasSeq: true})})
		r.mu.Lock()
		e := &write{r: r, phase: stored, node: 1, epoch: "e1", seq: 10}
		next := &write{r: r, phase: chained, node: 1, epoch: "e1", nodeEpoch: 100, hasEpoch: true, health: &flowstate.Health{Seq: 2, HasSeq: true}}
		e.next = next
		sent, cond := r.nextLocked(e)
		r.mu.Unlock()
		if c.stale {
			assert.Nil(t, sent, c.name)
			assert.Equal(t, refused, next.phase, c.name)
			assert.ErrorIs(t, next.err, ErrStale, c.name)
			continue
		}
		assert.Same(t, next, sent, c.name)
		assert.Equal(t, uint64(20), cond, "%s: conditioned on the later write", c.name)
		assert.Equal(t, uint64(2), next.lineage.seq, c.name)
	}
}
