package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/natstest"
)

func TestOnlyWorkersOfOneBucketShareAState(t *testing.T) {
	mem := peer{backend: "memory"}
	a := peer{backend: "jetstream", bucket: "a"}
	b := peer{backend: "jetstream", bucket: "b"}
	assert.True(t, a.sharesState(a))
	for _, pair := range [][2]peer{{mem, mem}, {mem, a}, {a, mem}, {a, b}} {
		assert.False(t, pair[0].sharesState(pair[1]), "%v beside %v", pair[0].state(), pair[1].state())
	}
}

func TestOfTwoWorkersExactlyOneStartedAfterTheOther(t *testing.T) {
	at := time.Unix(1700000000, 0)
	for name, pair := range map[string][2]peer{
		"later start":    {{started: at.Add(time.Nanosecond), worker: "a"}, {started: at, worker: "b"}},
		"same start":     {{started: at, worker: "b"}, {started: at, worker: "a"}},
		"same worker id": {{started: at, worker: "a", service: "2"}, {started: at, worker: "a", service: "1"}},
	} {
		assert.True(t, pair[0].startedAfter(pair[1]), name)
		assert.False(t, pair[1].startedAfter(pair[0]), name)
	}
}

func TestServiceMetadataNamesTheStateAndReadsBack(t *testing.T) {
	self := peer{worker: "h-1-abcd", backend: "jetstream", bucket: "flow_state", started: time.Unix(0, 1700000000123456789)}
	md := self.metadata()
	md["prefix"] = "flow"
	got := peerOf(serviceInfo{ID: "svc", Metadata: md})
	self.service = "svc"
	assert.Equal(t, prefixedPeer{peer: self, prefix: "flow"}, got)

	older := peerOf(serviceInfo{ID: "old", Metadata: map[string]string{"prefix": "flow"}})
	assert.Empty(t, older.backend, "a worker that names no backend is not judged")
	odd := peerOf(serviceInfo{ID: "odd", Metadata: map[string]string{"prefix": "flow", metaBackend: "redis"}})
	assert.Empty(t, odd.backend, "nor one that names a backend this worker does not know")
}

// A second memory worker of a prefix does not start; one of another prefix
// does.
func TestSecondMemoryWorkerOfAPrefixDoesNotOpen(t *testing.T) {
	url := natstest.Start(t, nil).ClientURL()
	first, _ := startMain(t, "--nats-url", url)
	require.NotEmpty(t, first.prefix.self.service)

	m := &Main{}
	require.NoError(t, m.ParseFlags([]string{"--nats-url", url}, noEnv, io.Discard, io.Discard))
	err := m.Open()
	require.ErrorIs(t, err, errOtherState)
	assert.Contains(t, err.Error(), first.id)
	assert.Contains(t, err.Error(), first.prefix.self.service)
	require.NoError(t, m.Close(t.Context()))

	startMain(t, "--nats-url", url, "--prefix", "other")
}
