package loadgen_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/internal/natstest"
)

// BenchmarkPublish is the generator's cost per published report against a
// bare loop of nc.Publish over the same encoded reports, to a server with
// no subscriber (1,000 nodes x 10 flows).
func BenchmarkPublish(b *testing.B) {
	srv := natstest.Start(b, nil)
	const nodes, flows = 1000, 10
	b.Run("loadgen", func(b *testing.B) {
		g, err := loadgen.New(connect(b, srv), loadgen.Config{Mode: loadgen.Publish, Nodes: nodes, Flows: flows, Reports: uint64(b.N)})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		if res := g.Run(context.Background()); res.FirstError != nil {
			b.Fatal(res.FirstError)
		}
	})
	b.Run("bare-publish", func(b *testing.B) {
		nc := connect(b, srv)
		subjects := make([]string, nodes)
		bodies := make([][]byte, nodes)
		for i := range nodes {
			subjects[i] = "flow.heartbeat." + strconv.Itoa(i)
			r := codec.Report{NodeID: uint64(i), NodeEpoch: loadgen.BaseMs, HasNodeEpoch: true}
			for k := 1; k <= flows; k++ {
				r.Flows = append(r.Flows, flowstate.Flow{ID: flowstate.FlowID(i*flows + k), Has: flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
					StateSize: uint64(k) << 12, LastExecTime: loadgen.BaseMs + int64(k), StartTime: loadgen.BaseMs})
			}
			bodies[i] = codec.AppendReport(nil, &r)
		}
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if err := nc.Publish(subjects[i%nodes], bodies[i%nodes]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
