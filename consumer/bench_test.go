package consumer_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
)

// BenchmarkGet measures a get's round trip through an embedded server with
// a 10,000-flow aggregate (1,000 nodes x 10 flows): "cached" when the state
// has not changed since the last get (the encoding is reused), "changed"
// when a report was applied just before (a copy and an encode per get; the
// report's ack is outside the timer).
func BenchmarkGet(b *testing.B) {
	f := startWorker(b, startServer(b, nil), consumer.Config{PublishInterval: consumer.DefaultPublishInterval})
	const nodes, flows = 1000, 10
	reportOf := func(node uint64, round int) []byte {
		fl := make([]flowstate.Flow, flows)
		for i := range fl {
			fl[i] = flowstate.Flow{ID: flowstate.FlowID(node*flows + uint64(i) + 1), Has: flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
				StateSize: uint64(1 << 20), LastExecTime: 1700000000000 + int64(round), StartTime: 1690000000000}
		}
		return report(node, fl...)
	}
	for node := range uint64(nodes) {
		ack(b, f.nc, node, reportOf(node, 0))
	}
	for _, format := range []string{"msgpack", "json"} {
		req := nats.NewMsg("flow.state.get")
		if format == "json" {
			req.Header.Set("Accept", "application/json")
		}
		get := func() {
			msg, err := f.nc.RequestMsg(req, wait)
			if err != nil || msg.Header.Get("Nats-Service-Error") != "" {
				b.Fatalf("get: %v %v", err, msg.Header)
			}
		}
		b.Run(fmt.Sprintf("cached/%s/flows=%d", format, nodes*flows), func(b *testing.B) {
			get()
			b.ReportAllocs()
			for b.Loop() {
				get()
			}
		})
		b.Run(fmt.Sprintf("changed/%s/flows=%d", format, nodes*flows), func(b *testing.B) {
			round := 0
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				round++
				ack(b, f.nc, uint64(round%nodes), reportOf(uint64(round%nodes), round))
				b.StartTimer()
				get()
			}
		})
	}
	require.NotZero(b, f.worker.Stats().Gets)
}
