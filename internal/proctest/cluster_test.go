package proctest

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// routePeers returns the names of the servers that server s (monitoring
// on port mon) has a route to.
func routePeers(t testing.TB, mon int) []string {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(mon) + "/routez")
	require.NoError(t, err)
	defer resp.Body.Close()
	var rz struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
		} `json:"routes"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rz))
	var out []string
	for _, r := range rz.Routes {
		if !slices.Contains(out, r.RemoteName) {
			out = append(out, r.RemoteName)
		}
	}
	slices.Sort(out)
	return out
}

func awaitPeers(t testing.TB, mon int, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := routePeers(t, mon)
		if slices.Equal(got, want) {
			return
		}
		require.True(t, time.Now().Before(deadline), "routes of the server monitored on %d: want %v, got %v", mon, want, got)
		time.Sleep(50 * time.Millisecond)
	}
}

// In a proxied cluster every route goes through its proxy: cutting the
// three proxies leaves no route at all, and a server that hears of a peer
// through a third one (s2 tells s1 about s0 once s0's route to s2 is back)
// does not open a route of its own to it.
func TestProxiedClusterHasNoRouteAroundItsProxies(t *testing.T) {
	mon := make([]int, 3)
	for i := range mon {
		port, err := FreePort()
		require.NoError(t, err)
		mon[i] = port
	}
	c, err := StartCluster(ClusterSpec{Path: natsServer, Proxied: true, Name: "proxied",
		StoreDir: func(int) string { return t.TempDir() },
		Args:     func(i int) []string { return []string{"-m", strconv.Itoa(mon[i])} }})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	require.NoError(t, c.AwaitJetStream(30*time.Second))
	awaitPeers(t, mon[0], "s1", "s2")
	awaitPeers(t, mon[1], "s0", "s2")

	for _, l := range [][2]int{{0, 1}, {0, 2}, {1, 2}} {
		c.Route(l[0], l[1]).Cut()
	}
	for i := range 3 {
		awaitPeers(t, mon[i])
	}

	c.Route(1, 2).Heal()
	awaitPeers(t, mon[1], "s2")
	c.Route(0, 2).Heal()
	awaitPeers(t, mon[2], "s0", "s1")
	// s2 gossips s0 to s1, which tries the address s0 advertises, once.
	_, err = c.Servers[1].AwaitOutput(regexp.MustCompile(`(?i)error trying to connect to route.*127\.0\.0\.1:1\b`), 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{"s2"}, routePeers(t, mon[1]), "s1 has no route to s0 while their proxy is cut")

	c.Route(0, 1).Heal()
	awaitPeers(t, mon[1], "s0", "s2")

	p, err := c.ClientProxy(1)
	require.NoError(t, err)
	assert.Equal(t, c.Servers[1].URL, "nats://"+p.Target())
}
