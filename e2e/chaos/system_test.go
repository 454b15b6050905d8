package chaos

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

const streamName = "KV_flow_state" // the stream of the workers' default bucket

var (
	serverReady = regexp.MustCompile(`Server is ready`)
	workerReady = regexp.MustCompile(`msg=serving `)
)

// system is the processes of one run: nats-servers and workers.
type system struct {
	jetstream bool
	servers   []*proc // servers[i] is named s<i>
	workers   []*proc
	urls      string // every server's client URL, comma-separated
	clock     func() int64
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startJetStreamSystem runs three clustered nats-servers with JetStream
// and three workers sharing an R3 file-storage bucket.
func startJetStreamSystem(t testing.TB, clock func() int64) *system {
	t.Helper()
	const n = 3
	s := &system{jetstream: true, clock: clock}
	routes := make([]string, n)
	for i := range routes {
		routes[i] = "nats://127.0.0.1:" + strconv.Itoa(freePort(t))
	}
	var urls []string
	for i := range n {
		port := freePort(t)
		var others []string
		for j, r := range routes {
			if j != i {
				others = append(others, r)
			}
		}
		s.servers = append(s.servers, &proc{
			name: fmt.Sprintf("nats-server s%d", i), path: bin.natsServer, env: cleanEnv(), ready: serverReady,
			args: []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", t.TempDir(),
				"-n", fmt.Sprintf("s%d", i), "--cluster_name", "chaos", "--cluster", routes[i],
				"--routes", strings.Join(others, ",")},
		})
		urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(port))
	}
	s.urls = strings.Join(urls, ",")
	s.startServers(t)
	s.awaitMetaLeader(t)
	for i := range n {
		s.workers = append(s.workers, &proc{
			name: fmt.Sprintf("worker %d", i), path: bin.worker, env: cleanEnv(), ready: workerReady,
			args: []string{"--nats-url", s.urls, "--kv", "jetstream", "--kv-replicas", "3", "--kv-storage", "file"},
		})
	}
	s.startWorkers(t)
	return s
}

// startMemorySystem runs one nats-server and one memory-backend worker of
// path with the extra environment env.
func startMemorySystem(t testing.TB, clock func() int64, path string, env ...string) *system {
	t.Helper()
	port := freePort(t)
	s := &system{clock: clock, urls: "nats://127.0.0.1:" + strconv.Itoa(port)}
	s.servers = []*proc{{name: "nats-server", path: bin.natsServer, env: cleanEnv(), ready: serverReady,
		args: []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port)}}}
	s.workers = []*proc{{name: "worker", path: path, env: append(cleanEnv(), env...), ready: workerReady,
		args: []string{"--nats-url", s.urls}}}
	s.startServers(t)
	s.startWorkers(t)
	return s
}

func (s *system) startServers(t testing.TB) {
	t.Helper()
	for _, p := range s.servers {
		require.NoError(t, p.start(s.clock))
		t.Cleanup(func() { _ = p.stop() })
	}
	for _, p := range s.servers {
		require.NoError(t, p.awaitReady())
	}
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
				t.Logf("%s, last output:\n%s", p.name, p.tail(30))
			}
		})
		require.NoError(t, p.awaitReady())
	}
}

// awaitMetaLeader waits until JetStream answers.
func (s *system) awaitMetaLeader(t testing.TB) {
	t.Helper()
	nc, err := nats.Connect(s.urls, nats.Timeout(startTimeout))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	}, startTimeout, 100*time.Millisecond, errNoQuorum)
}

// connect opens a connection that reconnects forever to any server.
func (s *system) connect(name string) (*nats.Conn, error) {
	return nats.Connect(s.urls, nats.Name(name), nats.Timeout(2*time.Second),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
}

// streamLeader returns the index of the server that leads the bucket's
// stream, or -1 if there is none now.
func streamLeader(js jetstream.JetStream) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, streamName)
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
