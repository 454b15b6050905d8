package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	clockpkg "github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/internal/netfault"
	"github.com/flowstate-io/flowstate/internal/proctest"
)

// The workers' default bucket and its stream.
const (
	bucket     = "flow_state"
	streamName = "KV_" + bucket
)

// maxFlows is the workers' --max-flows: above the large state's reports,
// low enough that a node value naming more flows fits in a message.
const maxFlows = 6000

// system is the processes of one run: nats-servers and workers. In the
// JetStream system every route and every worker's link to every server
// goes through a netfault.Proxy, so that the nemesis can partition them;
// the clients and the nemesis reach the servers directly.
type system struct {
	jetstream bool
	cluster   *proctest.Cluster // JetStream, or memory with routes (startRoutedMemorySystem)
	servers   []*proctest.Server
	workers   []*proc
	links     [][]*netfault.Proxy // links[w][i]: worker w's link to server i
	urls      string              // every server's client URL, comma-separated
	clock     func() int64
	disk      *tmpfs   // the server store the disk fault fills, if any
	dirs      []string // each server's store folder (JetStream)
	clockDir  string   // the workers' clock control files (clock faults)
	// metrics[w] is worker w's --metrics-addr, kept across its restarts,
	// for the liveness check (liveness_test.go).
	metrics []string
}

// metricsArgs returns the arguments that give a worker a metrics address
// of its own, and notes it.
func (s *system) metricsArgs(t testing.TB) []string {
	t.Helper()
	port, err := proctest.FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.metrics = append(s.metrics, addr)
	return []string{"--metrics-addr", addr}
}

// systemConfig says what to run besides the defaults.
type systemConfig struct {
	workers int // JetStream workers; 0: 3
	// disk, if not nil, holds server diskServer's store.
	disk       *tmpfs
	diskServer int
	workerArgs []string
	clock      bool // each worker is built with chaosclock and follows a control file (clock faults)
	// on, if set, pins each worker to one server: worker w reaches server
	// on[w] only (through its proxy); there are len(on) workers.
	on []int
	// serverConfig is the servers' configuration file;
	// proctest.WorkerServerConfig (the README's) if empty.
	serverConfig string
}

// startJetStreamSystem runs three clustered nats-servers with JetStream,
// routed through proxies, with the README's configuration for the servers
// of workers (unless cfg says otherwise), and workers sharing an R3
// file-storage bucket, each reaching each server through a proxy of its
// own.
func startJetStreamSystem(t testing.TB, clock func() int64, cfg systemConfig) *system {
	t.Helper()
	s := &system{jetstream: true, clock: clock, clockDir: t.TempDir()}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	if cfg.disk != nil {
		s.disk = cfg.disk
		dirs[cfg.diskServer] = s.disk.dir
		s.disk.server = cfg.diskServer
	}
	conf := cfg.serverConfig
	if conf == "" {
		conf = proctest.WorkerServerConfig
	}
	cl, err := proctest.StartCluster(proctest.ClusterSpec{Path: bin.natsServer, Name: "chaos", Proxied: true,
		StoreDir: func(i int) string { return dirs[i] }, Keep: logKeep, Config: conf, Monitor: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Log(err)
		}
	})
	s.cluster, s.servers, s.urls, s.dirs = cl, cl.Servers, strings.Join(cl.URLs(), ","), dirs
	require.NoError(t, cl.AwaitJetStream(startTimeout), errNoQuorum)
	n := cfg.workers
	if n == 0 {
		n = 3
	}
	if cfg.on != nil {
		n = len(cfg.on)
	}
	for w := range n {
		var links []*netfault.Proxy
		var urls []string
		for i := range s.servers {
			p, err := cl.ClientProxy(i)
			require.NoError(t, err)
			links = append(links, p)
			if cfg.on == nil || cfg.on[w] == i {
				urls = append(urls, "nats://"+p.Addr())
			}
		}
		s.links = append(s.links, links)
		args := append([]string{"--nats-url", strings.Join(urls, ","), "--kv", "jetstream", "--kv-replicas", "3",
			"--kv-storage", "file", "--max-flows", fmt.Sprint(maxFlows)}, cfg.workerArgs...)
		args = append(args, s.metricsArgs(t)...)
		path, env := bin.worker, []string(nil)
		if cfg.clock {
			path, env = bin.clockWorker, append(env, clockpkg.ControlEnv+"="+s.clockFile(w))
		}
		s.workers = append(s.workers, newWorkerProc(fmt.Sprintf("worker %d", w), path, env, args...))
	}
	s.startWorkers(t)
	return s
}

// startMemorySystem runs one nats-server and one memory-backend worker of
// path with the extra environment env.
func startMemorySystem(t testing.TB, clock func() int64, path string, env ...string) *system {
	t.Helper()
	srv, err := proctest.StartServer(proctest.ServerSpec{Path: bin.natsServer, Keep: logKeep})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := srv.StopGracefully(); err != nil {
			t.Log(err)
		}
	})
	s := &system{clock: clock, urls: srv.URL, servers: []*proctest.Server{srv}}
	args := append([]string{"--nats-url", s.urls, "--max-flows", fmt.Sprint(maxFlows)}, s.metricsArgs(t)...)
	s.workers = []*proc{newWorkerProc("worker", path, env, args...)}
	s.startWorkers(t)
	return s
}

// startRoutedMemorySystem runs three clustered nats-servers, routed through
// proxies, with the servers' configuration conf, and one memory-backend
// worker on s1 alone: a route of the cluster can hold a request on its way
// to the worker.
func startRoutedMemorySystem(t testing.TB, clock func() int64, conf string) *system {
	t.Helper()
	cl, err := proctest.StartCluster(proctest.ClusterSpec{Path: bin.natsServer, Name: "chaos", Proxied: true,
		StoreDir: func(int) string { return t.TempDir() }, Keep: logKeep, Config: conf, Monitor: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Log(err)
		}
	})
	s := &system{clock: clock, cluster: cl, servers: cl.Servers, urls: strings.Join(cl.URLs(), ",")}
	s.workers = []*proc{newWorkerProc("worker", bin.worker, nil, "--nats-url", cl.Servers[1].URL, "--max-flows", fmt.Sprint(maxFlows))}
	s.startWorkers(t)
	return s
}

// startWorkers starts the workers one after the other, so that the first
// creates the bucket.
func (s *system) startWorkers(t testing.TB) {
	t.Helper()
	for _, p := range s.workers {
		require.NoError(t, p.start(s.clock))
		t.Cleanup(func() {
			if err := p.stop(); err != nil {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("%s, last output:\n%s", p.name, p.Tail(30))
			}
		})
		require.NoError(t, p.awaitReady())
	}
}

// connect opens a connection that reconnects forever to any server.
func (s *system) connect(name string) (*nats.Conn, error) { return connectTo(s.urls, name) }

// connectTo connects to urls (comma-separated) as the nemesis's clients
// do: it keeps retrying and reconnecting.
func connectTo(urls, name string) (*nats.Conn, error) {
	return nats.Connect(urls, nats.Name(name), nats.Timeout(2*time.Second),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
}

// streamLeader returns the index of the server that leads the bucket's
// stream, or -1 if there is none now.
func streamLeader(js jetstream.JetStream) int {
	return proctest.StreamLeader(js, streamName, 2*time.Second)
}

// moveStreamLeader asks the bucket stream's leader to hand over to server
// i, and waits (bounded) until it has; it returns what happened.
func moveStreamLeader(nc *nats.Conn, js jetstream.JetStream, i int) string {
	if streamLeader(js) == i {
		return "it was"
	}
	msg, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+streamName,
		[]byte(fmt.Sprintf(`{"placement":{"preferred":"s%d"}}`, i)), 5*time.Second)
	if err != nil {
		return "step-down: " + err.Error()
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if streamLeader(js) == i {
			return "done"
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Sprintf("it did not take over: %s", msg.Data)
}
