package consumer_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// fullestStatsState fills m with the fullest stats state the default
// limits allow: 10,000 nodes naming 100,000 flows (10 each, with
// processed_rows), and 100,000 errors of 167 or 168 bytes (16 MiB of
// messages): ten a node, three on each of its first three flows and one on
// the fourth, every message a string of its own.
func fullestStatsState(tb testing.TB, m *state.Manager) {
	const nodes, flowsPerNode = state.DefaultMaxNodes, state.DefaultMaxTotalFlows / state.DefaultMaxNodes
	msgLen := state.DefaultMaxErrorBytes / state.DefaultMaxErrors
	for node := range uint64(nodes) {
		rep := state.Report{Node: node + 1, Health: &flowstate.Health{HasProcessedRows: true, HasLastErrors: true}}
		for k := range flowsPerNode {
			id := flowstate.FlowID(node*flowsPerNode) + flowstate.FlowID(k)
			rep.Flows = append(rep.Flows, flowstate.Flow{ID: id, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 1 << 20, LastExecTime: 1_700_000_000_000})
			f := flowstate.FlowHealth{ID: id, Has: flowstate.HasProcessedRows, ProcessedRows: 52_000}
			if n := min(max(10-3*k, 0), 3); n > 0 {
				f.Has |= flowstate.HasLastErrors
				for e := range n {
					f.LastErrors = append(f.LastErrors, flowstate.FlowError{Time: int64(e), Message: fmt.Sprintf("%0*d", msgLen, node*10+uint64(e))})
				}
			}
			rep.Health.Flows = append(rep.Health.Flows, f)
		}
		_, err := m.Merge(context.Background(), rep)
		require.NoError(tb, err)
	}
	require.Equal(tb, state.DefaultMaxErrors, m.Errors())
}

// BenchmarkStatsOfTheFullestDefaultState measures, on the fullest stats
// state the default limits allow (fullestStatsState), the heap it holds,
// a chunked stats get through NATS (nats-server's default 1 MiB max
// payload), and the delay a concurrent stats get adds to a heartbeat's ack.
// Run it once: go test -run '^$' -bench StatsOfTheFullest -benchtime 1x ./consumer/
func BenchmarkStatsOfTheFullestDefaultState(b *testing.B) {
	m := state.NewManager(state.Options{Limits: state.Limits{MaxNodes: state.DefaultMaxNodes, MaxFlows: state.DefaultMaxTotalFlows,
		MaxErrorBytes: state.DefaultMaxErrorBytes, MaxErrors: state.DefaultMaxErrors}})
	fullestStatsState(b, m)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	atRest := ms.HeapInuse
	srv := startServer(b, &server.Options{MaxPayload: 1 << 20})
	f := startWorkerOn(b, srv, m, consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	c, err := client.New(connect(b, srv), client.Options{Timeout: time.Minute})
	require.NoError(b, err)

	// A heartbeat every 10 ms on its own connection while stats gets run.
	var stop atomic.Bool
	var worst atomic.Int64
	var wg sync.WaitGroup
	body := codec.AppendReport(nil, &codec.Report{NodeID: 1, Flows: []flowstate.Flow{{ID: 0, Has: flowstate.HasStateSize, StateSize: 1}}})
	wg.Go(func() {
		for !stop.Load() {
			start := time.Now()
			ack(b, f.nc, 1, body)
			if d := time.Since(start); d.Nanoseconds() > worst.Load() {
				worst.Store(d.Nanoseconds())
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	time.Sleep(200 * time.Millisecond)
	idle := time.Duration(worst.Swap(0))
	var gets time.Duration
	var peak uint64
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		view, _, err := c.GetStats(context.Background())
		gets += time.Since(start)
		require.NoError(b, err)
		require.Greater(b, len(view.Flows), state.DefaultMaxTotalFlows-10, "the state's flows")
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	b.ReportMetric(float64(gets.Milliseconds())/float64(b.N), "ms/chunked-get")
	b.ReportMetric(float64(idle.Microseconds())/1000, "ack-max-idle-ms")
	b.ReportMetric(float64(time.Duration(worst.Load()).Microseconds())/1000, "ack-max-during-gets-ms")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(atRest)/(1<<20), "heap-at-rest-MiB")
}
