package proctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/internal/netfault"
)

// deadClusterAddr is what a proxied cluster's servers advertise as their
// cluster address: nothing listens on port 1, so a route that a server
// would open to a peer it heard of through a third one (an implicit
// route, tried once) is refused instead of going around the proxies.
const deadClusterAddr = "127.0.0.1:1"

// ClusterSpec says how to run a JetStream cluster of nats-servers.
type ClusterSpec struct {
	Path string // the nats-server binary
	N    int    // servers; 0: 3
	Name string // the cluster's name; "": "proctest"
	// StoreDir returns server i's JetStream store directory.
	StoreDir func(i int) string
	// Proxied sends every route through a netfault.Proxy: each server
	// opens its routes to each other one through a proxy of its own (two
	// per pair: Link). The servers advertise no client URLs, so that
	// clients given proxies (ClientProxy) use nothing else.
	Proxied bool
	// Monitor gives every server a monitoring port (-m), for RoutePeers.
	Monitor bool
	// Config, if not empty, is a nats-server configuration file that every
	// server reads (-c) before its command-line arguments, which win: for
	// example WorkerServerConfig.
	Config string
	// Args returns more arguments for server i (nil: none).
	Args func(i int) []string
	Keep int // bytes of each server's output kept (0: all)
	// OwnGroup runs each server in a process group of its own (see Spec).
	OwnGroup bool
}

// WorkerServerConfig is the nats-server configuration the README
// recommends for the servers of workers: a route that answers no ping is
// closed within (ping_max+1) x ping_interval of going silent (15 s), a
// client within one interval more (20 s), and one whose socket takes
// nothing for write_deadline at once; what it held is dropped.
const WorkerServerConfig = `ping_interval: "5s"
ping_max: 2
write_deadline: "10s"
`

// Cluster is N nats-servers with JetStream, routed to each other on
// loopback; server i is named s<i>.
type Cluster struct {
	Servers []*Server
	links   map[[2]int]*Link
	confDir string // where Config was written; removed by Close
	monitor []int  // each server's monitoring port, if ClusterSpec.Monitor

	mu      sync.Mutex // guards proxies
	proxies []*netfault.Proxy
}

// StartCluster starts the servers and waits until each one is ready (not
// until JetStream has a leader: AwaitJetStream). Close stops them.
func StartCluster(spec ClusterSpec) (*Cluster, error) {
	if spec.N == 0 {
		spec.N = 3
	}
	if spec.Name == "" {
		spec.Name = "proctest"
	}
	if spec.StoreDir == nil {
		return nil, errors.New("proctest: ClusterSpec.StoreDir is required")
	}
	var errs []error
	for range clusterTries {
		c := &Cluster{links: map[[2]int]*Link{}}
		err := c.start(spec)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err, c.Close())
		if !errors.Is(err, errClusterPortTaken) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// clusterTries is how many times StartCluster starts a cluster whose
// cluster port was taken (errClusterPortTaken), with new ports each time.
const clusterTries = 3

// errClusterPortTaken is a server that could not listen on the cluster
// port chosen for it: FreePort lets go of the port it found, and another
// listener may take it before the server binds it. nats-server says it is
// ready before it listens for routes, and then exits.
var errClusterPortTaken = errors.New("proctest: a server's cluster port was taken")

// clusterPortError marks err, a server's failure to start whose output it
// holds, as errClusterPortTaken when the server could not listen on its
// cluster port.
func clusterPortError(err error) error {
	if strings.Contains(err.Error(), routeListenFailed) {
		return fmt.Errorf("%w: %w", errClusterPortTaken, err)
	}
	return err
}

// routeListening is the line nats-server logs once it listens for routes;
// routeListenFailed, the line before it exits when it cannot.
var (
	routeListening    = regexp.MustCompile(`Listening for route connections on`)
	routeListenFailed = "Error listening on router port"
)

func (c *Cluster) start(spec ClusterSpec) error {
	listen := make([]string, spec.N) // host:port of each cluster listener
	for i := range listen {
		port, err := FreePort()
		if err != nil {
			return err
		}
		listen[i] = "127.0.0.1:" + strconv.Itoa(port)
	}
	for i := range spec.N {
		for j := i + 1; spec.Proxied && j < spec.N; j++ {
			ab, err := c.proxy(listen[j])
			if err != nil {
				return err
			}
			ba, err := c.proxy(listen[i])
			if err != nil {
				return err
			}
			c.links[[2]int{i, j}] = &Link{A: i, B: j, ab: ab, ba: ba}
		}
	}
	var conf []string
	if spec.Config != "" {
		dir, err := os.MkdirTemp("", "proctest-cluster-")
		if err != nil {
			return err
		}
		c.confDir = dir
		path := filepath.Join(dir, "server.conf")
		if err := os.WriteFile(path, []byte(spec.Config), 0o600); err != nil {
			return err
		}
		conf = []string{"-c", path}
	}
	for i := range spec.N {
		var routes []string
		for j := range spec.N {
			switch {
			case j == i:
			case spec.Proxied && j > i:
				routes = append(routes, "nats://"+c.links[[2]int{i, j}].ab.Addr())
			case spec.Proxied:
				routes = append(routes, "nats://"+c.links[[2]int{j, i}].ba.Addr())
			default:
				routes = append(routes, "nats://"+listen[j])
			}
		}
		args := append(slices.Clone(conf), "-js", "-sd", spec.StoreDir(i), "-n", fmt.Sprintf("s%d", i),
			"--cluster_name", spec.Name, "--cluster", "nats://"+listen[i])
		if len(routes) > 0 {
			args = append(args, "--routes", strings.Join(routes, ","))
		}
		if spec.Proxied {
			args = append(args, "--no_advertise", "--cluster_advertise", deadClusterAddr)
		}
		if spec.Monitor {
			port, err := FreePort()
			if err != nil {
				return err
			}
			c.monitor = append(c.monitor, port)
			args = append(args, "-m", strconv.Itoa(port))
		}
		if spec.Args != nil {
			args = append(args, spec.Args(i)...)
		}
		s, err := StartServer(ServerSpec{Name: fmt.Sprintf("nats-server s%d", i), Path: spec.Path, Args: args,
			Keep: spec.Keep, OwnGroup: spec.OwnGroup})
		if err != nil {
			return clusterPortError(err)
		}
		c.Servers = append(c.Servers, s)
	}
	for i, s := range c.Servers {
		if _, err := s.AwaitOutput(routeListening, StartTimeout); err != nil {
			return clusterPortError(fmt.Errorf("proctest: s%d does not listen for routes: %w", i, err))
		}
	}
	return nil
}

func (c *Cluster) proxy(target string) (*netfault.Proxy, error) {
	p, err := netfault.Start(target)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.proxies = append(c.proxies, p)
	c.mu.Unlock()
	return p, nil
}

// URLs returns every server's client URL (not through a proxy).
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.URL
	}
	return out
}

// Route returns the link between servers i and j (either order), or nil
// if the cluster is not proxied.
func (c *Cluster) Route(i, j int) *Link {
	return c.links[[2]int{min(i, j), max(i, j)}]
}

// RoutePeers returns the names of the servers that server i has at least
// one route connection to, sorted, from its monitoring port (the cluster
// must have been started with Monitor).
func (c *Cluster) RoutePeers(i int) ([]string, error) {
	if i >= len(c.monitor) {
		return nil, fmt.Errorf("proctest: server s%d has no monitoring port: start the cluster with Monitor", i)
	}
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(c.monitor[i]) + "/routez")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var rz struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
		} `json:"routes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rz); err != nil {
		return nil, fmt.Errorf("proctest: /routez of s%d: %w", i, err)
	}
	var out []string
	for _, r := range rz.Routes {
		if !slices.Contains(out, r.RemoteName) {
			out = append(out, r.RemoteName)
		}
	}
	slices.Sort(out)
	return out, nil
}

// AwaitRoutePeers waits, up to timeout, until server i's routes lead to
// exactly the servers want (RoutePeers).
func (c *Cluster) AwaitRoutePeers(i int, want []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := c.RoutePeers(i)
		if err == nil && slices.Equal(got, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("proctest: routes of s%d: want %v, got %v (%v) after %v; %s", i, want, got, err, timeout, c.serverState(i))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serverState says whether server i runs, and its last lines of output.
func (c *Cluster) serverState(i int) string {
	if i >= len(c.Servers) {
		return "no such server"
	}
	s := c.Servers[i]
	state := "running"
	if s.Exited() {
		state = fmt.Sprintf("exited with code %d", s.ExitCode())
	}
	return fmt.Sprintf("s%d %s, its last output:\n%s", i, state, s.Tail(15))
}

// ClientProxy starts a proxy to server i's client port, which Close
// closes. Its URL is "nats://" + Addr().
func (c *Cluster) ClientProxy(i int) (*netfault.Proxy, error) {
	return c.proxy(c.Servers[i].URL[len("nats://"):])
}

// AwaitJetStream waits, up to timeout, until JetStream answers an account
// info request (the cluster has a meta leader).
func (c *Cluster) AwaitJetStream(timeout time.Duration) error {
	return AwaitJetStream(strings.Join(c.URLs(), ","), timeout)
}

// AwaitJetStream waits, up to timeout, until JetStream answers an account
// info request on url (a comma-separated list of servers).
func AwaitJetStream(url string, timeout time.Duration) error {
	nc, err := nats.Connect(url, nats.Timeout(timeout))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("proctest: JetStream on %s has no meta leader within %v: %w", url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StreamLeader returns the index of the server that leads stream, or -1
// if there is none now (or js cannot tell within timeout).
func StreamLeader(js jetstream.JetStream, stream string, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return -1
	}
	info := st.CachedInfo()
	if info.Cluster == nil {
		return -1
	}
	i, err := strconv.Atoi(strings.TrimPrefix(info.Cluster.Leader, "s"))
	if err != nil {
		return -1
	}
	return i
}

// Close stops every server (SIGTERM, SIGKILL after StopTimeout) and closes
// every proxy; the error names the servers that had to be killed.
func (c *Cluster) Close() error {
	var errs []error
	var wg sync.WaitGroup
	errc := make([]error, len(c.Servers))
	for i, s := range c.Servers {
		wg.Go(func() { errc[i] = s.StopGracefully() })
	}
	wg.Wait()
	errs = append(errs, errc...)
	c.mu.Lock()
	proxies := c.proxies
	c.proxies = nil
	c.mu.Unlock()
	for _, p := range proxies {
		errs = append(errs, p.Close())
	}
	if c.confDir != "" {
		errs = append(errs, os.RemoveAll(c.confDir))
	}
	return errors.Join(errs...)
}
