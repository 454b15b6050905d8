package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"flowstate/consumer"
	"flowstate/flowstate"
	"flowstate/protocol"
)

// TestSendOutWritesTheBodyAnotherClientSends sends the file that --out
// writes as a plain NATS request, as `nats req flow.heartbeat.7
// --force-stdin < report.bin` does, and sees the worker apply it.
func TestSendOutWritesTheBodyAnotherClientSends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.bin")
	// No server: --out does not connect.
	code, stdout, stderr := runCLI(t, noEnv, "send", "--nats-url", "nats://127.0.0.1:1",
		"--node", "7", "--flow", "3:2048:1700000000000:1690000000000", "--out", path)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stdout)
	assert.Empty(t, stderr)
	body, err := os.ReadFile(path)
	require.NoError(t, err)

	code, stdout, stderr = runCLI(t, noEnv, "send", "--node", "7",
		"--flow", "3:2048:1700000000000:1690000000000", "--out", "-")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, string(body), stdout, "--out - writes the same body to stdout")

	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("test-raw"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	reply, err := nc.RequestWithContext(bounded(t), "flow.heartbeat.7", body)
	require.NoError(t, err)
	assert.Empty(t, reply.Header.Get(protocol.HeaderErrorCode), "the worker accepts the body")

	s, err := testClient(t, srv, "flow").Get(bounded(t))
	require.NoError(t, err)
	assert.Equal(t, map[flowstate.FlowID]uint64{3: 2048}, s.Value.StateSize)
	assert.Equal(t, map[flowstate.FlowID]int64{3: 1700000000000}, s.Value.LastExecTimeMap)
	assert.Equal(t, map[flowstate.FlowID]int64{3: 1690000000000}, s.Value.StartTimeMap)
}
