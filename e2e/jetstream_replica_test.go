package e2e

import (
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJetStreamWorkerNamesTheServerThatNeedsARestart: a worker of an R3
// bucket tells the operator which server of the bucket needs a restart,
// once the stream's leader has not heard from its replica for
// --kv-replica-silence: one log line and flowstate_store_server_restart_needed
// for that server, until it is back and current, which it logs once too.
// The server here is killed; to the stream's leader a server whose store
// failed a write (a full disk, which e2e/chaos fills) looks the same.
func TestJetStreamWorkerNamesTheServerThatNeedsARestart(t *testing.T) {
	t.Parallel()
	cl := startCluster(t)
	w := startJSWorkers(t, cl.URLs, 1, "--kv-replicas", "3", "--kv-storage", "file", "--kv-replica-silence", "2s",
		"--metrics-addr", "127.0.0.1:0")[0]
	addr := w.waitStderr(metricsListening)[1]
	js, err := jetstream.New(connect(t, cl.servers[0].URL))
	require.NoError(t, err)
	stream, err := js.Stream(t.Context(), "KV_"+jsBucket)
	require.NoError(t, err)
	var follower string
	for _, r := range stream.CachedInfo().Cluster.Replicas {
		follower = r.Name
	}
	require.NotEmpty(t, follower)
	metric := `flowstate_store_server_restart_needed{server="` + follower + `"}`

	killed := time.Now()
	cl.server(t, follower).kill()
	line := w.waitStderr(regexp.MustCompile(`level=ERROR msg="a server of the bucket's stream needs a restart.* server=(s\d)`))
	assert.Equal(t, follower, line[1], "the line names the killed server")
	t.Logf("reported %v after the kill (--kv-replica-silence 2s)", time.Since(killed).Round(time.Millisecond))
	v, ok := scrapeMetric(t, addr, metric)
	require.True(t, ok, "%s is exported", metric)
	assert.Equal(t, 1.0, v)

	cl.server(t, follower).Restart()
	w.waitStderr(regexp.MustCompile(`a server of the bucket's stream is current again.* server=` + follower))
	v, _ = scrapeMetric(t, addr, metric)
	assert.Zero(t, v)
	assert.Len(t, regexp.MustCompile(`needs a restart`).FindAllString(w.Stderr(), -1), 1, "one line for one condition")
}
