package state

import (
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// BenchmarkReplicaApply measures the watch's apply path in steady state,
// 1,000 nodes x 10 flows, each node's report changing every flow: "own"
// applies this worker's writes from the flows it kept, found by their
// sequence number (no decoding, no allocation), and answers them; "others"
// decodes another worker's.
func BenchmarkReplicaApply(b *testing.B) {
	const nodes, flows = 1000, 10
	var reports [2][nodes][]flowstate.Flow
	var values [2][nodes][]byte
	keys := make([]string, nodes)
	for n := range nodes {
		keys[n] = flowstate.NodeKey(uint64(n + 1))
		for p := range 2 {
			fs := make([]flowstate.Flow, flows)
			for f := range fs {
				id := flowstate.FlowID(n*flows + f + 1)
				fs[f] = flowstate.Flow{ID: id, Has: flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
					StateSize: uint64(1<<20 + int(id)*64 + p), LastExecTime: 1_700_000_000_000 + int64(id)*1000 + int64(p),
					StartTime: 1_690_000_000_000 + int64(id)}
			}
			reports[p][n], values[p][n] = fs, flowstate.AppendJSON(nil, fs)
		}
	}
	now := time.Unix(1_700_000_000, 0)
	for _, own := range []bool{true, false} {
		name := "others"
		if own {
			name = "own"
		}
		b.Run(name, func(b *testing.B) {
			r, err := NewReplica(nil, ReplicaOptions{})
			if err != nil {
				b.Fatal(err)
			}
			r.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
			r.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1"}, Exact: true})
			var seq uint64
			step := func(i int) {
				n, p := i%nodes, (i/nodes)%2
				seq++
				if own { // a report of this worker, stored at seq: answered once applied
					r.window <- struct{}{}
					r.mu.Lock()
					e := r.writes.push(r, noAnswer{})
					e.node, e.epoch, e.delivered = uint64(n+1), "e1", seq-1
					r.writes.keepLocked(e, reports[p][n], nil, errorLoad{}, false, r.watch.agg)
					e.to(sent)
					e.to(stored)
					e.seq, e.deadline = seq, r.clock+applyTicks
					r.mu.Unlock()
				}
				r.onEvent(kv.Event{Op: kv.OpPut, Key: keys[n], Value: values[p][n],
					Revision: kv.Revision{Epoch: "e1", Seq: seq}, Time: now, Exact: true})
			}
			for i := range 2 * nodes { // every node known, every buffer grown
				step(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				step(i)
			}
		})
	}
}

// noAnswer is a Completion that does nothing.
type noAnswer struct{}

func (noAnswer) Complete(MergeResult, error) {}
