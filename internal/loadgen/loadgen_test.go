package loadgen_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/internal/natstest"
)

func TestAckedLoadEndsOnEachNodesLastAcknowledgedReport(t *testing.T) {
	_, nc := setup(t)
	var mu sync.Mutex
	var progress []loadgen.Progress
	g, err := loadgen.New(nc, loadgen.Config{
		Nodes: 10, Flows: 3, Duration: 300 * time.Millisecond, InFlight: 4,
		Progress: func(p loadgen.Progress) {
			mu.Lock()
			progress = append(progress, p)
			mu.Unlock()
		},
	})
	require.NoError(t, err)

	res := g.Run(testCtx(t))
	assert.Positive(t, res.Acked)
	assert.Zero(t, res.Failed)
	assert.NoError(t, res.FirstError)
	assert.Equal(t, res.Sent, res.Acked)
	assert.Positive(t, res.Rate())
	assert.Equal(t, int64(res.Acked), res.Latency.Count)
	assert.Positive(t, res.Latency.P50)
	assert.LessOrEqual(t, res.Latency.P50, res.Latency.P99)
	assert.LessOrEqual(t, res.Latency.P99, res.Latency.Max)
	assert.GreaterOrEqual(t, res.Elapsed, 300*time.Millisecond)

	chk, err := g.Check(testCtx(t))
	require.NoError(t, err)
	assert.True(t, chk.Exact(), "diff: %v", chk.Diff)
	assert.Len(t, chk.State.Value.StateSize, 30)

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, progress, "progress is reported at the end")
	assert.Equal(t, res.Acked, progress[len(progress)-1].Acked)
}

func TestARateBoundsTheReportsSent(t *testing.T) {
	_, nc := setup(t)
	for _, mode := range []loadgen.Mode{loadgen.Acked, loadgen.Publish} {
		g, err := loadgen.New(nc, loadgen.Config{Mode: mode, Nodes: 3, Flows: 1, Rate: 200, Duration: 250 * time.Millisecond})
		require.NoError(t, err)
		res := g.Run(testCtx(t))
		assert.Positive(t, res.Sent, mode)
		assert.LessOrEqual(t, res.Sent, uint64(50), mode)
	}
}

func TestPublishedReportsAreExactAfterASync(t *testing.T) {
	_, nc := setup(t)
	g, err := loadgen.New(nc, loadgen.Config{Mode: loadgen.Publish, Nodes: 50, Flows: 4, Reports: 1234})
	require.NoError(t, err)
	require.NoError(t, g.WarmUp(testCtx(t)))

	res := g.Run(testCtx(t))
	assert.Equal(t, uint64(1234), res.Sent, "Reports bounds a run exactly")
	assert.Zero(t, res.Acked)
	assert.Positive(t, res.Rate())
	require.NoError(t, g.Sync(testCtx(t)))
	chk, err := g.Check(testCtx(t))
	require.NoError(t, err)
	assert.True(t, chk.Exact(), "diff: %v", chk.Diff)
	assert.Len(t, chk.State.Value.StateSize, 200)
}

func TestTwoGeneratorsOfDisjointNodesCheckTogether(t *testing.T) {
	srv, nc := setup(t)
	pub, err := loadgen.New(nc, loadgen.Config{Mode: loadgen.Publish, Nodes: 20, Flows: 2, Reports: 100})
	require.NoError(t, err)
	acks, err := loadgen.New(connect(t, srv), loadgen.Config{FirstNode: 20, Nodes: 3, Flows: 2, Reports: 30})
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { acks.Run(testCtx(t)) })
	pub.Run(testCtx(t))
	wg.Wait()
	require.NoError(t, pub.Sync(testCtx(t)))

	alone, err := pub.Check(testCtx(t))
	require.NoError(t, err)
	assert.Contains(t, alone.Diff, "flow 41: present, but no simulated node owns it")
	chk, err := pub.Check(testCtx(t), acks)
	require.NoError(t, err)
	assert.True(t, chk.Exact(), "diff: %v", chk.Diff)
	assert.Len(t, chk.State.Value.StateSize, 46)
}

func TestCheckSaysWhatDiffers(t *testing.T) {
	srv, nc := setup(t)
	c, err := client.New(connect(t, srv), client.Options{})
	require.NoError(t, err)
	_, err = c.Send(testCtx(t), client.Report{NodeID: 1000, Value: flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{999999: 1}}})
	require.NoError(t, err)
	g, err := loadgen.New(nc, loadgen.Config{Nodes: 2, Flows: 2, Reports: 4, InFlight: 1})
	require.NoError(t, err)
	g.Run(testCtx(t))
	chk, err := g.Check(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"flow 999999: present, but no simulated node owns it"}, chk.Diff)

	// Node 0's flows replaced by a report the generator did not send.
	_, err = c.Send(testCtx(t), client.Report{NodeID: 0, Value: flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{1: 7}}})
	require.NoError(t, err)
	chk, err = g.Check(testCtx(t))
	require.NoError(t, err)
	assert.Contains(t, chk.Diff, "flow 1 of node 0: state_size is 7, want 4097")
	assert.Contains(t, chk.Diff, "flow 2 of node 0: state_size is absent, want 8193")
}

func TestWithoutAWorkerReportsFailAndCheckErrs(t *testing.T) {
	srv := natstest.Start(t, nil)
	g, err := loadgen.New(connect(t, srv), loadgen.Config{Nodes: 2, Flows: 1, Reports: 3, Timeout: time.Second})
	require.NoError(t, err)
	res := g.Run(testCtx(t))
	assert.Equal(t, uint64(3), res.Failed)
	assert.ErrorIs(t, res.FirstError, nats.ErrNoResponders)
	_, err = g.Check(testCtx(t))
	assert.ErrorIs(t, err, client.ErrNoWorker)
	assert.Error(t, g.Sync(testCtx(t)))
}

func TestConfigValidateRejectsNonsense(t *testing.T) {
	ok := loadgen.Config{Nodes: 1, Flows: 1, Duration: time.Second}
	require.NoError(t, ok.Validate())
	for name, mutate := range map[string]func(*loadgen.Config){
		"no nodes":          func(c *loadgen.Config) { c.Nodes = 0 },
		"negative first":    func(c *loadgen.Config) { c.FirstNode = -1 },
		"negative flows":    func(c *loadgen.Config) { c.Flows = -1 },
		"too many flow ids": func(c *loadgen.Config) { c.Nodes, c.Flows = 1<<20, 1<<13 },
		"negative rate":     func(c *loadgen.Config) { c.Rate = -1 },
		"no bound":          func(c *loadgen.Config) { c.Duration = 0 },
		"negative in fl.":   func(c *loadgen.Config) { c.InFlight = -1 },
		"negative timeout":  func(c *loadgen.Config) { c.Timeout = -1 },
		"unknown mode":      func(c *loadgen.Config) { c.Mode = 7 },
		"bad prefix":        func(c *loadgen.Config) { c.Prefix = "a.*" },
	} {
		c := ok
		mutate(&c)
		assert.ErrorIs(t, c.Validate(), loadgen.ErrConfig, name)
	}
	_, err := loadgen.New(nil, ok)
	assert.Error(t, err)
}

func TestSyncSendsAgainWhenTheSyncReportTimesOut(t *testing.T) {
	srv := natstest.Start(t, nil)
	responder := connect(t, srv)
	var mu sync.Mutex
	var seen []string
	_, err := responder.Subscribe("flow.heartbeat.*", func(m *nats.Msg) {
		mu.Lock()
		seen = append(seen, m.Subject)
		first := len(seen) == 1
		mu.Unlock()
		if !first { // the first is lost, as a dropped report would be
			_ = m.Respond(nil)
		}
	})
	require.NoError(t, err)
	require.NoError(t, responder.Flush())
	g, err := loadgen.New(connect(t, srv), loadgen.Config{Mode: loadgen.Publish, Nodes: 3, Reports: 1, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)

	require.NoError(t, g.Sync(testCtx(t)))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"flow.heartbeat.0", "flow.heartbeat.0"}, seen)
}
