package codec

import (
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/flowstate-io/flowstate/flowstate"
)

var benchSizes = []int{10, 100, 1000}

// benchReport is a report of n flows, each in all three maps, as
// AppendReport writes it: integer ids in ascending order.
func benchReport(n int) []byte {
	return AppendReport(nil, &Report{NodeID: 1, NodeEpoch: 1_690_000_000_000, HasNodeEpoch: true, Flows: fullFlows(n)})
}

// benchReportUnsorted is the same report as a Go program would send it with
// msgpack/v5 and map[string]int64: string ids in map order.
func benchReportUnsorted(tb testing.TB, n int) []byte {
	v := flowstate.ValueOf(fullFlows(n))
	return libraryMarshal(tb, map[string]any{
		"node_id":            uint64(1),
		"node_epoch":         uint64(1_690_000_000_000),
		"state_size":         stringKeyed(v.StateSize),
		"last_exec_time_map": stringKeyed(v.LastExecTimeMap),
		"start_time_map":     stringKeyed(v.StartTimeMap),
	}, true)
}

func perFlow(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/flow")
}

func benchDecode(b *testing.B, n int, body []byte) {
	d := Decoder{MaxFlows: 100_000}
	var r Report
	if err := d.Decode(body, &r); err != nil { // warm the buffers up
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := d.Decode(body, &r); err != nil {
			b.Fatal(err)
		}
	}
	perFlow(b, n)
}

func BenchmarkDecodeReport(b *testing.B) {
	for _, n := range benchSizes {
		body := benchReport(n)
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) { benchDecode(b, n, body) })
	}
}

func BenchmarkDecodeReportUnsorted(b *testing.B) {
	for _, n := range benchSizes {
		body := benchReportUnsorted(b, n)
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) { benchDecode(b, n, body) })
	}
}

// BenchmarkDecodeReportReflect is the baseline: msgpack/v5's reflection
// decoder on the same bytes as BenchmarkDecodeReport, into a struct of maps.
func BenchmarkDecodeReportReflect(b *testing.B) {
	for _, n := range benchSizes {
		body := benchReport(n)
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var w wireStruct
				if err := msgpack.Unmarshal(body, &w); err != nil {
					b.Fatal(err)
				}
			}
			perFlow(b, n)
		})
	}
}

func BenchmarkAppendAggregate(b *testing.B) {
	for _, n := range append(benchSizes, 10_000) {
		flows := fullFlows(n)
		dst := AppendAggregate(nil, flows)
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(dst)))
			for b.Loop() {
				dst = AppendAggregate(dst[:0], flows)
			}
			perFlow(b, n)
		})
	}
}

// BenchmarkDecodeReportV3 decodes reports whose flows all carry processed
// rows and one error of 40 bytes, the message repeated from one report to
// the next as a node repeats its errors.
func BenchmarkDecodeReportV3(b *testing.B) {
	for _, n := range benchSizes {
		r := Report{NodeID: 1, NodeEpoch: 1_700_000_000_000, HasNodeEpoch: true, Flows: fullFlows(n),
			Health: flowstate.Health{HasProcessedRows: true, HasLastErrors: true, HasSeq: true, Seq: 9}}
		for _, f := range r.Flows {
			r.Health.Flows = append(r.Health.Flows, flowstate.FlowHealth{ID: f.ID,
				Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: uint64(f.ID) * 1000,
				LastErrors: []flowstate.FlowError{{Time: 1_700_000_000_000, Message: "sink table missing: greptime.public.t"}}})
		}
		body := AppendReport(nil, &r)
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) { benchDecode(b, n, body) })
	}
}
