package state

import (
	"testing"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// fuzzMaxFlows is --max-flows in FuzzReplicaAppliesAnyStoredValue: the
// writer's limit, which the rule does not read.
const fuzzMaxFlows = 4

// FuzzReplicaAppliesAnyStoredValue feeds a replica whatever a node's key
// may hold: it never panics, and the node is exactly the value's flows if
// the strict decoders (serde_json's rules, FuzzAppendValueFlows, and the
// v3 fields' rules, DecodeNodeHealth) accept it, whatever --max-flows, and
// absent otherwise, at the write's revision.
func FuzzReplicaAppliesAnyStoredValue(f *testing.F) {
	for _, s := range []string{
		`{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}`,
		`{"state_size":{"1":1,"2":2,"3":3,"4":4,"5":5},"last_exec_time_map":{}}`,
		`[{"1":1},{"2":2}]`,
		`{"state_size":{"1":-1},"last_exec_time_map":{}}`,
		`not json`, ``, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		r, err := NewReplica(nil, ReplicaOptions{MaxReportFlows: fuzzMaxFlows})
		if err != nil {
			t.Fatal(err)
		}
		r.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e"}})
		r.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e"}, Exact: true})
		before := flowstate.AppendJSON(nil, []flowstate.Flow{{ID: 9, Has: flowstate.HasStateSize, StateSize: 9}})
		r.onEvent(kv.Event{Op: kv.OpPut, Key: flowstate.NodeKey(1), Value: before, Revision: kv.Revision{Epoch: "e", Seq: 1}, Exact: true})
		r.onEvent(kv.Event{Op: kv.OpPut, Key: flowstate.NodeKey(1), Value: value, Revision: kv.Revision{Epoch: "e", Seq: 2}, Exact: true})

		s, err := r.Snapshot(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.Revision != 2 {
			t.Fatalf("revision %d, want the write's, 2", s.Revision)
		}
		want, err := flowstate.AppendValueFlows(nil, value)
		if _, _, herr := flowstate.DecodeNodeHealth(value, &flowstate.Health{}); err != nil || herr != nil {
			want = nil // no value: the node is absent
		}
		if len(s.Flows) != len(want) {
			t.Fatalf("%q: the state holds %d flows, the rule %d", value, len(s.Flows), len(want))
		}
		for i := range want {
			if s.Flows[i] != want[i] {
				t.Fatalf("%q: flow %d is %+v, the rule's %+v", value, i, s.Flows[i], want[i])
			}
		}
	})
}
