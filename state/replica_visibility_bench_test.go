package state_test

import (
	"testing"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/state"
)

// BenchmarkReplicaVisibility measures a report acked on one Replica until
// another Replica of the same shared store shows it without a read barrier:
// the write plus the lag of the second one's watch, per report
// (docs/performance.md).
func BenchmarkReplicaVisibility(b *testing.B) {
	mem := kv.NewSharedMemory(kv.SharedMemoryOptions{})
	w1 := follow(b, mem, state.ReplicaOptions{})
	w2 := follow(b, mem, state.ReplicaOptions{})
	b.ResetTimer()
	for i := range b.N {
		r := fmerge(b, w1.mgr, uint64(i%10), lastExecOf(uint64(i), flowstate.FlowID(i%10)))
		awaitVisible(b, w2.mgr, r.Revision)
	}
}
