package main

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWorkerTalksToTheEmbeddedServerInProcess(t *testing.T) {
	m, _ := startMain(t, "--listen", "127.0.0.1:0")
	require.NotNil(t, m.srv)
	connz, err := m.srv.Connz(&server.ConnzOptions{})
	require.NoError(t, err)
	var worker *server.ConnInfo
	for _, c := range connz.Conns {
		if c.Name == "flowstate-worker" {
			worker = c
		}
	}
	require.NotNil(t, worker, "the worker's connection")
	assert.Zero(t, worker.Port, "in-process: no TCP port; %+v", worker)
}
