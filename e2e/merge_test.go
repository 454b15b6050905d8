package e2e

import (
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// mergeStep is one report of a merge rule.
type mergeStep struct {
	node   uint64
	report flowState
}

// mergeRules are GreptimeDB's merge tests, as reports sent through the wire
// and the aggregate a get must then return.
var mergeRules = []struct {
	name  string
	steps []mergeStep
	want  flowState
}{
	{
		name: "keeps reports from different nodes",
		steps: []mergeStep{
			{1, lastExec(map[uint32]int64{1: 100})},
			{2, lastExec(map[uint32]int64{2: 200})},
			{1, lastExec(map[uint32]int64{1: 300})},
		},
		want: lastExec(map[uint32]int64{1: 300, 2: 200}),
	},
	{
		name: "replaces same node state",
		steps: []mergeStep{
			{1, lastExec(map[uint32]int64{1: 100})},
			{1, lastExec(map[uint32]int64{2: 200})},
		},
		want: lastExec(map[uint32]int64{2: 200}),
	},
	{
		name: "accepts clock rollback from same node",
		steps: []mergeStep{
			{1, lastExec(map[uint32]int64{1: 100})},
			{1, lastExec(map[uint32]int64{1: 50})},
		},
		want: lastExec(map[uint32]int64{1: 50}),
	},
	{
		name: "aggregates state_size and last_exec_time by max",
		steps: []mergeStep{
			{1, flowState{StateSize: map[uint32]uint64{1: 1024}, LastExecTime: map[uint32]int64{1: 100}}},
			{2, flowState{StateSize: map[uint32]uint64{1: 2048}, LastExecTime: map[uint32]int64{1: 50}}},
		},
		want: flowState{StateSize: map[uint32]uint64{1: 2048}, LastExecTime: map[uint32]int64{1: 100}},
	},
	{
		name: "aggregates start_time by max",
		steps: []mergeStep{
			{1, flowState{StartTime: map[uint32]int64{1: 100, 2: -5}}},
			{2, flowState{StartTime: map[uint32]int64{1: 50, 2: -7}}},
		},
		want: flowState{StartTime: map[uint32]int64{1: 100, 2: -5}},
	},
	{
		name: "lowered max falls back to the other nodes",
		steps: []mergeStep{
			{1, flowState{StateSize: map[uint32]uint64{1: 1024}}},
			{2, flowState{StateSize: map[uint32]uint64{1: 2048}}},
			{2, flowState{StateSize: map[uint32]uint64{1: 10}}},
		},
		want: flowState{StateSize: map[uint32]uint64{1: 1024}},
	},
	{
		name: "empty report removes own flows keeps others",
		steps: []mergeStep{
			{1, lastExec(map[uint32]int64{1: 100})},
			{2, lastExec(map[uint32]int64{2: 200})},
			{1, lastExec(map[uint32]int64{})},
		},
		want: lastExec(map[uint32]int64{2: 200}),
	},
	{
		name: "report with absent maps removes own flows keeps others",
		steps: []mergeStep{
			{1, flowState{StateSize: map[uint32]uint64{1: 1}, LastExecTime: map[uint32]int64{1: 100}, StartTime: map[uint32]int64{1: 90}}},
			{2, flowState{StateSize: map[uint32]uint64{2: 2}}},
			{1, flowState{}},
		},
		want: flowState{StateSize: map[uint32]uint64{2: 2}},
	},
}

// TestMergeRules runs each of GreptimeDB's merge rules through the wire, with
// reports written by each encoder, and requires the exact aggregate.
func TestMergeRules(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	for ri, rule := range mergeRules {
		t.Run(rule.name, func(t *testing.T) {
			t.Parallel()
			for ei, enc := range encodings {
				t.Run(enc.name, func(t *testing.T) {
					w := startWorker(t, srv.URL, "--prefix", fmt.Sprintf("merge%d.enc%d", ri, ei))
					c := newClient(t, w)
					var last version
					for _, s := range rule.steps {
						v := c.report(s.node, enc.encode(t, s.node, s.report))
						require.Greater(t, v.Revision, last.Revision, "revision of an ack")
						last = v
					}
					got := c.requireState(rule.want)
					require.Equal(t, last, got, "a get after the last ack is at its version")
				})
			}
		})
	}
}

// TestConcurrentReportsLoseNoUpdate sends one report from each of many
// nodes at once, over several connections, and requires every one of them in
// the aggregate.
func TestConcurrentReportsLoseNoUpdate(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL)
	const nodes, conns = 64, 4
	clients := make([]*client, conns)
	for i := range clients {
		clients[i] = newClient(t, w)
	}
	want := flowState{}.normalized()
	reports := make([][]byte, nodes)
	for n := range nodes {
		node := uint64(n + 1)
		r := flowState{
			StateSize:    map[uint32]uint64{0: node * 10, uint32(node): node},
			LastExecTime: map[uint32]int64{0: int64(node), uint32(node): 1_700_000_000_000 + int64(node)},
			StartTime:    map[uint32]int64{uint32(node): int64(node)},
		}
		reports[n] = encodings[n%len(encodings)].encode(t, node, r)
		want.StateSize[0] = max(want.StateSize[0], r.StateSize[0])
		want.LastExecTime[0] = max(want.LastExecTime[0], r.LastExecTime[0])
		want.StateSize[uint32(node)] = r.StateSize[uint32(node)]
		want.LastExecTime[uint32(node)] = r.LastExecTime[uint32(node)]
		want.StartTime[uint32(node)] = r.StartTime[uint32(node)]
	}
	start := make(chan struct{})
	acks := make([]*nats.Msg, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[n%conns]
			<-start
			acks[n], errs[n] = c.nc.Request(c.heartbeatSubject(uint64(n+1)), reports[n], requestTimeout)
		}()
	}
	close(start)
	wg.Wait()
	revisions := map[uint64]bool{}
	var maxRev uint64
	for n := range nodes {
		require.NoError(t, errs[n], "report of node %d", n+1)
		v := requireAck(t, acks[n])
		require.False(t, revisions[v.Revision], "two acks with revision %d", v.Revision)
		revisions[v.Revision] = true
		maxRev = max(maxRev, v.Revision)
	}
	got := clients[0].requireState(want)
	require.Equal(t, maxRev, got.Revision, "a get after every ack is at the last ack's revision")
}
