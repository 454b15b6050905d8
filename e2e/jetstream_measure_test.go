package e2e

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/loadgen"
)

// TestJetStreamGetAfterAckSeesTheReport acks reports on three workers and
// gets right after each ack: whichever worker answers, the get includes the
// report (the read barrier), so the cross-worker visibility bound of a get
// is zero.
func TestJetStreamGetAfterAckSeesTheReport(t *testing.T) {
	t.Parallel()
	srv := startJetStreamServer(t)
	ws := startJSWorkers(t, srv.URL, 3)
	c := newClient(t, ws[0])
	reported := map[uint64]flowState{}
	for i := range 150 {
		node := uint64(i % 15)
		s := nodeReport(node, i)
		ack := c.report(node, codecReport(node, s))
		reported[node] = s
		m := c.get()
		require.GreaterOrEqual(t, m.Revision, ack.Revision, "get %d after an ack", i)
		require.Equal(t, ack.Epoch, m.Epoch)
		if m.Revision == ack.Revision {
			require.Equal(t, canonicalMsgpack(aggregateOf(reported)), m.Body, "get %d: the state at the ack's revision", i)
		}
	}
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	for id, n := range getStats(t, c.nc, ids) {
		assert.NotZero(t, n, "worker %s served gets", id)
	}
}

// TestJetStreamMeasure measures what docs/performance.md reports: the rate of acked
// reports of 1,000 nodes with 10 flows each, on one worker with the memory
// backend and on one and three workers with --kv jetstream; and how long
// after an ack the publisher's update carrying it arrives on the state
// subject. It runs only with FLOWSTATE_E2E_MEASURE=1.
func TestJetStreamMeasure(t *testing.T) {
	if os.Getenv("FLOWSTATE_E2E_MEASURE") == "" {
		t.Skip("set FLOWSTATE_E2E_MEASURE=1 to measure")
	}
	duration := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FLOWSTATE_E2E_MEASURE_DURATION")); err == nil {
		duration = d
	}
	for _, tc := range []struct {
		name    string
		workers int
		cluster bool
		args    []string
	}{
		{"memory, 1 worker", 1, false, nil},
		{"jetstream (memory storage, R1), 1 worker", 1, false, []string{"--kv", "jetstream"}},
		{"jetstream (memory storage, R1), 3 workers", 3, false, []string{"--kv", "jetstream"}},
		{"jetstream (file storage, R1), 1 worker", 1, false, []string{"--kv", "jetstream", "--kv-storage", "file"}},
		{"jetstream (file storage, R1), 3 workers", 3, false, []string{"--kv", "jetstream", "--kv-storage", "file"}},
		{"jetstream (file storage, R3, 3 servers), 3 workers", 3, true, []string{"--kv", "jetstream", "--kv-storage", "file", "--kv-replicas", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var url, urls string
			if tc.cluster {
				cl := startCluster(t)
				url, urls = cl.servers[0].URL, cl.URLs
			} else {
				url = startJetStreamServer(t).URL
				urls = url
			}
			var ids []string
			for range tc.workers {
				w := launchWorker(t, nil, append([]string{"--nats-url", urls}, tc.args...)...)
				w.URL = url
				w.awaitReady(ids...)
				ids = append(ids, w.ID)
			}
			g, err := loadgen.New(connect(t, url), loadgen.Config{Nodes: 1000, Flows: 10, Duration: duration, InFlight: 256})
			require.NoError(t, err)
			res := g.Run(context.Background())
			chk, err := g.Check(context.Background())
			require.NoError(t, err)
			assert.True(t, chk.Exact(), "final state: %v", chk.Diff)
			t.Logf("%s: %d acked in %v: %.0f reports/s; ack latency p50 %v p99 %v max %v; %d failed",
				tc.name, res.Acked, res.Elapsed.Round(time.Millisecond), res.Rate(), res.Latency.P50, res.Latency.P99, res.Latency.Max, res.Failed)
		})
	}

	t.Run("state update after an ack, 3 workers", func(t *testing.T) {
		srv := startJetStreamServer(t)
		ws := startJSWorkers(t, srv.URL, 3, "--publish-interval", "0")
		c := newClient(t, ws[0])
		u := c.subscribeUpdates()
		const samples = 200
		var lags []time.Duration
		for i := range samples {
			node := uint64(i % 20)
			ack := c.report(node, codecReport(node, nodeReport(node, i)))
			acked := time.Now()
			for m := u.next(); m.Revision < ack.Revision; m = u.next() {
			}
			lags = append(lags, time.Since(acked))
		}
		slices.Sort(lags)
		t.Logf("state update on %s after an ack, %d samples: p50 %v, p99 %v, max %v", c.prefix+".state",
			samples, lags[samples/2], lags[samples*99/100], lags[samples-1])
	})
}
