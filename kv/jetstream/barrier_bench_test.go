package jetstream_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv/jetstream"
)

// BenchmarkReadBarrier is the read barrier a get passes (LastRevision: a
// write of the probe key, shared by the callers waiting at once, then the
// stream's info) against the stream's info alone, which the barrier was
// before it wrote, on one file-less server; "parallel" runs GOMAXPROCS x 8
// callers, as concurrent gets do.
func BenchmarkReadBarrier(b *testing.B) {
	nc := connectTo(b, startJetStream(b))
	st := openStore(b, nc, jetstream.Config{ProbeInterval: time.Hour})
	js, err := jetstreamFor(nc)
	require.NoError(b, err)
	stream, err := js.Stream(b.Context(), "KV_"+st.Bucket())
	require.NoError(b, err)
	info := func() error { _, err := stream.Info(b.Context()); return err }
	barrier := func() error { _, err := st.LastRevision(b.Context()); return err }
	for _, c := range []struct {
		name string
		fn   func() error
	}{{"info", info}, {"barrier", barrier}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.fn(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
