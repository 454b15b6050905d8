package proctest

import (
	"errors"
	"net"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func awaitPeers(t testing.TB, c *Cluster, i int, want ...string) {
	t.Helper()
	require.NoError(t, c.AwaitRoutePeers(i, want, 30*time.Second))
}

// startMeshed starts a proxied, monitored cluster of three servers with the
// configuration conf and waits until each has its routes to the others.
func startMeshed(t *testing.T, conf string) *Cluster {
	t.Helper()
	c, err := StartCluster(ClusterSpec{Path: natsServer, Proxied: true, Name: "meshed", Monitor: true, Config: conf,
		StoreDir: func(int) string { return t.TempDir() }})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	require.NoError(t, c.AwaitJetStream(30*time.Second))
	awaitPeers(t, c, 0, "s1", "s2")
	awaitPeers(t, c, 1, "s0", "s2")
	return c
}

// In a proxied cluster every route goes through its proxy: cutting the
// three proxies leaves no route at all, and a server that hears of a peer
// through a third one (s2 tells s1 about s0 once s0's route to s2 is back)
// does not open a route of its own to it.
func TestProxiedClusterHasNoRouteAroundItsProxies(t *testing.T) {
	c := startMeshed(t, "")

	for _, l := range [][2]int{{0, 1}, {0, 2}, {1, 2}} {
		c.Route(l[0], l[1]).Cut()
	}
	for i := range 3 {
		awaitPeers(t, c, i)
	}

	c.Route(1, 2).Heal()
	awaitPeers(t, c, 1, "s2")
	c.Route(0, 2).Heal()
	awaitPeers(t, c, 2, "s0", "s1")
	// s2 gossips s0 to s1, which tries the address s0 advertises, once.
	_, err := c.Servers[1].AwaitOutput(regexp.MustCompile(`(?i)error trying to connect to route.*127\.0\.0\.1:1\b`), 30*time.Second)
	require.NoError(t, err)
	peers, err := c.RoutePeers(1)
	require.NoError(t, err)
	assert.Equal(t, []string{"s2"}, peers, "s1 has no route to s0 while their proxy is cut")

	c.Route(0, 1).Heal()
	awaitPeers(t, c, 1, "s0", "s2")

	p, err := c.ClientProxy(1)
	require.NoError(t, err)
	assert.Equal(t, c.Servers[1].URL, "nats://"+p.Target())
}

// With the README's settings for the servers of workers (here ten times
// faster), both ends close a route that stalls, as they do a client that
// answers no ping, and it comes back once it flows again. The close is
// awaited for 10 s: past the configured pings (ping_max 2 of 500 ms, a
// 1 s write deadline), short of the defaults' (2 of 2 minutes), so only
// the configuration can close the route in time.
func TestClusterConfigClosesAStalledRoute(t *testing.T) {
	c := startMeshed(t, "ping_interval: \"500ms\"\nping_max: 2\nwrite_deadline: \"1s\"\n")

	c.Route(0, 1).Stall()
	const byConfig = 10 * time.Second
	require.NoError(t, c.AwaitRoutePeers(0, []string{"s2"}, byConfig), "s0 closed its stalled route to s1")
	require.NoError(t, c.AwaitRoutePeers(1, []string{"s2"}, byConfig), "s1 closed its stalled route to s0")
	c.Route(0, 1).Heal()
	awaitPeers(t, c, 0, "s1", "s2")
}

// A server that cannot listen on its cluster port exits after it says it
// is ready: StartCluster does not take it for started, and tries again,
// with new ports, before it gives up.
func TestStartClusterTriesAgainWhenAClusterPortIsTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	taken := l.Addr().String()
	tries := 0
	_, err = StartCluster(ClusterSpec{Path: natsServer, N: 2, StoreDir: func(int) string { return t.TempDir() },
		Args: func(i int) []string {
			if i == 0 {
				return nil
			}
			tries++
			return []string{"--cluster", "nats://" + taken} // wins over the port StartCluster chose
		}})
	require.Error(t, err)
	assert.True(t, errors.Is(err, errClusterPortTaken), "not taken for a taken port: %.400s", err)
	assert.Equal(t, clusterTries, tries, "a try with new ports each time")
}
