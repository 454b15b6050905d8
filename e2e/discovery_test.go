package e2e

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMicroServiceIsDiscoverable finds the worker with $SRV.PING,
// $SRV.INFO and $SRV.STATS, and requires the get endpoint's request count
// to follow the gets.
func TestMicroServiceIsDiscoverable(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--prefix", "disco.tenant1")
	c := newClient(t, w)
	getSubject := "disco.tenant1.state.get"

	for _, subject := range []string{"$SRV.PING", "$SRV.PING." + serviceName, "$SRV.PING." + serviceName + "." + w.ID} {
		var ping micro.Ping
		require.NoError(t, json.Unmarshal(c.request(subject, nil, nil).Data, &ping), subject)
		assert.Equal(t, serviceName, ping.Name, subject)
		assert.Equal(t, w.ID, ping.ID, subject)
		assert.Equal(t, micro.PingResponseType, ping.Type, subject)
	}

	var info micro.Info
	require.NoError(t, json.Unmarshal(c.request("$SRV.INFO."+serviceName, nil, nil).Data, &info))
	assert.Equal(t, serviceName, info.Name)
	assert.Equal(t, micro.InfoResponseType, info.Type)
	var endpoint *micro.EndpointInfo
	for i := range info.Endpoints {
		if info.Endpoints[i].Subject == getSubject {
			endpoint = &info.Endpoints[i]
		}
	}
	require.NotNil(t, endpoint, "INFO lists an endpoint on %s: %+v", getSubject, info.Endpoints)

	getStats := func() int {
		t.Helper()
		var stats micro.Stats
		require.NoError(t, json.Unmarshal(c.request("$SRV.STATS."+serviceName+"."+w.ID, nil, nil).Data, &stats))
		assert.Equal(t, micro.StatsResponseType, stats.Type)
		for _, e := range stats.Endpoints {
			if e.Subject == getSubject {
				assert.Equal(t, endpoint.Name, e.Name)
				assert.Zero(t, e.NumErrors)
				return e.NumRequests
			}
		}
		require.Failf(t, "no get endpoint", "STATS lists no endpoint on %s", getSubject)
		return 0
	}
	before := getStats()
	c.get()
	c.getJSON()
	c.get()
	assert.Equal(t, before+3, getStats(), "num_requests of the get endpoint after 3 gets")
}
