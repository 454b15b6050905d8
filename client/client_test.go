package client_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
)

func TestNewRejectsBadOptions(t *testing.T) {
	srv := startServer(t)
	nc := connect(t, srv)
	for name, opts := range map[string]client.Options{
		"wildcard prefix":  {Prefix: "flow.*"},
		"empty token":      {Prefix: "a..b"},
		"negative timeout": {Timeout: -1},
	} {
		_, err := client.New(nc, opts)
		assert.Error(t, err, name)
	}
	_, err := client.New(nil, client.Options{})
	assert.Error(t, err, "nil connection")
}

func TestGetBeforeAnyReportReturnsRevisionZeroAndEmptyValue(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})

	s, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.NotEmpty(t, s.Epoch)
	assert.Zero(t, s.Revision)
	assert.Empty(t, s.Value.Flows())
	assert.NotNil(t, s.Value.StateSize)
	assert.False(t, s.EpochChanged)
}

func TestSendReturnsTheVersionThatGetThenSees(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{Prefix: "custom.flows"})
	c := newClient(t, srv, client.Options{Prefix: "custom.flows"})

	v1 := mustSend(t, c, report(1, 1024, 1700000000000, 1, 2))
	v2 := mustSend(t, c, client.Report{NodeID: 2, NodeEpoch: 1699999999000, Value: flowstate.FlowStateValue{
		StateSize: map[flowstate.FlowID]uint64{10: 4096},
	}})
	assert.NotEmpty(t, v1.Epoch)
	assert.Equal(t, v1.Epoch, v2.Epoch)
	assert.Greater(t, v2.Revision, v1.Revision)

	s, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v2, s.Version)
	want := flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{1: 1024, 2: 1024, 10: 4096},
		LastExecTimeMap: map[flowstate.FlowID]int64{1: 1700000000000, 2: 1700000000000},
		StartTimeMap:    map[flowstate.FlowID]int64{1: 1699999999000, 2: 1699999999000},
	}
	assert.True(t, want.Equal(s.Value), "got %+v", s.Value)
}

func TestGetJSONReturnsTheSerdeJSONBytes(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})
	mustSend(t, c, client.Report{NodeID: 3, Value: flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{2: 2048, 10: 1, 1: 1024},
		LastExecTimeMap: map[flowstate.FlowID]int64{1: 1700000000000},
	}})
	v := mustSend(t, c, client.Report{NodeID: 4})

	body, got, err := c.GetJSON(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v, got)
	assert.Equal(t, `{"state_size":{"1":1024,"2":2048,"10":1},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}`, string(body))
}

func TestSendOfARejectedReportReturnsServiceError400AndChangesNothing(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{MaxFlows: 2})
	c := newClient(t, srv, client.Options{})
	before := mustSend(t, c, report(1, 1, 1, 1))

	_, err := c.Send(testCtx(t), report(1, 1, 1, 1, 2, 3))
	var se *client.ServiceError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 400, se.Code)
	assert.True(t, se.Rejected())
	assert.Contains(t, se.Reason, "flows")
	assert.Equal(t, "flow.heartbeat.1", se.Subject)
	assert.NotContains(t, err.Error(), "\n")

	s, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, before, s.Version, "a rejected report changes nothing")
	assert.Len(t, s.Value.StateSize, 1)
}

func TestRequestsWithoutWorkerReturnErrNoWorker(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv, client.Options{})

	_, err := c.Send(testCtx(t), report(1, 1, 1, 1))
	assert.ErrorIs(t, err, client.ErrNoWorker)
	_, err = c.Get(testCtx(t))
	assert.ErrorIs(t, err, client.ErrNoWorker)
	_, _, err = c.GetJSON(testCtx(t))
	assert.ErrorIs(t, err, client.ErrNoWorker)
	var se *client.ServiceError
	assert.False(t, errors.As(err, &se))
}

func TestPublishedReportIsApplied(t *testing.T) {
	srv := startServer(t)
	startWorker(t, srv, consumer.Config{})
	c := newClient(t, srv, client.Options{})

	require.NoError(t, c.Publish(report(7, 99, 5, 70)))
	// The worker applies reports in arrival order, and both go out on the
	// same connection: once the second is acknowledged, the first is in.
	v := mustSend(t, c, report(8, 1, 5, 80))

	s, err := c.Get(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, v, s.Version)
	assert.Equal(t, uint64(99), s.Value.StateSize[70])
	assert.Equal(t, uint64(1), s.Value.StateSize[80])
}

func TestReportAppendMsgpackOmitsAbsentNodeEpoch(t *testing.T) {
	with := client.Report{NodeID: 1, NodeEpoch: 5}.AppendMsgpack(nil)
	without := client.Report{NodeID: 1}.AppendMsgpack(nil)
	assert.Equal(t, byte(0x85), with[0], "a map of 5 fields")
	assert.Equal(t, byte(0x84), without[0], "a map of 4 fields")
}
