package client_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"flowstate/client"
	"flowstate/consumer"
)

func TestLoadEndsOnEachNodesLastAcknowledgedReport(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	var mu sync.Mutex
	var progress []client.LoadProgress

	res, err := c.Load(testCtx(t), client.LoadConfig{
		Nodes: 10, Flows: 3, Duration: 300 * time.Millisecond, Concurrency: 4,
		Progress: func(p client.LoadProgress) {
			mu.Lock()
			progress = append(progress, p)
			mu.Unlock()
		},
	})
	require.NoError(t, err)
	assert.True(t, res.Exact(), "diff: %v", res.Diff)
	assert.Positive(t, res.Acked)
	assert.Zero(t, res.Failed)
	assert.NoError(t, res.FirstError)
	assert.Equal(t, res.Sent, res.Acked+res.Failed)
	assert.Positive(t, res.AppliedRate())
	assert.Positive(t, res.P50)
	assert.LessOrEqual(t, res.P50, res.P99)
	assert.LessOrEqual(t, res.P99, res.Max)
	assert.Len(t, res.Final.Value.StateSize, 30)
	assert.GreaterOrEqual(t, res.Elapsed, 300*time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, progress, "progress is reported at the end")
	assert.Equal(t, res.Acked, progress[len(progress)-1].Acked)
}

func TestLoadAtARateSendsNoMoreThanRateTimesDuration(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})

	res, err := c.Load(testCtx(t), client.LoadConfig{Nodes: 3, Flows: 1, Rate: 200, Duration: 250 * time.Millisecond})
	require.NoError(t, err)
	assert.Positive(t, res.Sent)
	assert.LessOrEqual(t, res.Sent, uint64(50))
	assert.True(t, res.Exact(), "diff: %v", res.Diff)
}

func TestLoadReportsFlowsThatNoSimulatedNodeOwns(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	mustSend(t, c, report(1000, 1, 1, 999999))

	res, err := c.Load(testCtx(t), client.LoadConfig{Nodes: 2, Flows: 2, Duration: 50 * time.Millisecond})
	require.NoError(t, err)
	assert.False(t, res.Exact())
	assert.Equal(t, []string{"flow 999999: present, but no simulated node owns it"}, res.Diff)
}

func TestLoadWithoutWorkerFails(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv, client.Options{})
	_, err := c.Load(testCtx(t), client.LoadConfig{Nodes: 1, Flows: 1, Duration: time.Second})
	assert.ErrorIs(t, err, client.ErrNoWorker)
}

func TestLoadConfigValidateRejectsNonsense(t *testing.T) {
	ok := client.LoadConfig{Nodes: 1, Flows: 1, Duration: time.Second}
	require.NoError(t, ok.Validate())
	for name, mutate := range map[string]func(*client.LoadConfig){
		"no nodes":          func(c *client.LoadConfig) { c.Nodes = 0 },
		"negative flows":    func(c *client.LoadConfig) { c.Flows = -1 },
		"too many flow ids": func(c *client.LoadConfig) { c.Nodes, c.Flows = 1<<20, 1<<13 },
		"negative rate":     func(c *client.LoadConfig) { c.Rate = -1 },
		"no duration":       func(c *client.LoadConfig) { c.Duration = 0 },
		"negative conc.":    func(c *client.LoadConfig) { c.Concurrency = -1 },
	} {
		c := ok
		mutate(&c)
		assert.Error(t, c.Validate(), name)
	}
}
