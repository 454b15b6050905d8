package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/wait"
)

// oldServerVersion is a nats-server that does not enforce subject-fenced
// writes (Nats-Expected-Last-Subject-Sequence-Subject came in 2.11).
const oldServerVersion = "v2.10.27"

// buildTimeout bounds the build of the old nats-server (a download of its
// module on the first run, then the build cache).
const buildTimeout = 5 * time.Minute

// oldServer is the old nats-server, built once per run of the tests, next
// to the binaries TestMain builds.
var oldServer struct {
	once sync.Once
	path string
	err  error
}

// oldNATSServer returns the path of nats-server oldServerVersion, building
// it from the module proxy on first use: a module of its own that requires
// that version, so that this module's go.mod is not touched.
func oldNATSServer(t testing.TB) string {
	t.Helper()
	oldServer.once.Do(func() {
		dir := filepath.Join(filepath.Dir(bin.natsServer), "nats-server-"+oldServerVersion)
		oldServer.path = filepath.Join(dir, "nats-server")
		if oldServer.err = os.MkdirAll(dir, 0o755); oldServer.err != nil {
			return
		}
		gomod := "module oldnatsserver\n\ngo 1.22\n\nrequire github.com/nats-io/nats-server/v2 " + oldServerVersion + "\n"
		if oldServer.err = os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); oldServer.err != nil {
			return
		}
		if err := goBuildModule(dir, oldServer.path, "github.com/nats-io/nats-server/v2"); err != nil {
			oldServer.err = fmt.Errorf("nats-server %s: %w", oldServerVersion, err)
		}
	})
	require.NoError(t, oldServer.err)
	return oldServer.path
}

// goBuildModule builds pkg of the module in dir, whose go.mod and go.sum
// are not this module's, into out within buildTimeout: missing go.sum lines
// are added and modules not in the cache come from GOPROXY.
func goBuildModule(dir, out, pkg string) error {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// goTool is the go command of GOROOT, if set, else the one on PATH.
func goTool() string {
	if goroot := os.Getenv("GOROOT"); goroot != "" {
		if p := filepath.Join(goroot, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startOldJetStreamServer runs the old nats-server with JetStream on a free
// port of 127.0.0.1 and returns its URL; Cleanup stops it.
func startOldJetStreamServer(t testing.TB) string {
	t.Helper()
	path := oldNATSServer(t)
	for range 3 {
		port := freePort(t)
		p := startProcess(t, "nats-server "+oldServerVersion, path, nil,
			"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", t.TempDir())
		if _, err := p.awaitStderr(serverReady, startTimeout); err == nil {
			t.Cleanup(func() { p.terminate(stopTimeout) })
			return "nats://127.0.0.1:" + strconv.Itoa(port)
		}
		p.terminate(stopTimeout) // the port was taken
	}
	t.Fatal("nats-server " + oldServerVersion + " did not start")
	return ""
}

// tooOldLine is the one line a worker gives on a server older than 2.11:
// both versions named.
var tooOldLine = regexp.MustCompile(`nats-server 2\.10\.27 does not enforce subject-fenced writes ` +
	`\(Nats-Expected-Last-Subject-Sequence-Subject\); a shared state needs nats-server 2\.11 or newer`)

func TestWorkerWithJetStreamExitsOnAServerOlderThan2_11(t *testing.T) {
	url := startOldJetStreamServer(t)

	p := startProcess(t, "worker", bin.worker, nil, "--nats-url", url, "--kv", "jetstream")
	code, ok := p.wait(startTimeout)
	require.True(t, ok, "the worker did not exit within %v; stderr:\n%s", startTimeout, p.stderr.String())
	stderr := p.stderr.String()
	assert.Equal(t, 1, code, "exit code; stderr:\n%s", stderr)
	lines := linesMatching(stderr, tooOldLine)
	assert.Len(t, lines, 1, "one line naming both versions; stderr:\n%s", stderr)
	assert.NotContains(t, stderr, "serving")
	assert.NotContains(t, stderr, "panic")
}

// startClusterMember runs the nats-server at path as member name of a
// cluster of two on 127.0.0.1, with JetStream and server tag name, routed
// to the other member's cluster port; it returns the client URL once the
// server accepts clients. Cleanup stops it.
func startClusterMember(t testing.TB, path, name string, port, clusterPort, peerPort int) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), name+".conf")
	writeFile(t, conf, fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
server_tags: [%q]
jetstream { store_dir: %q }
cluster {
  name: mixed
  listen: 127.0.0.1:%d
  routes: ["nats-route://127.0.0.1:%d"]
}
`, name, port, name, t.TempDir(), clusterPort, peerPort))
	p := startProcess(t, "nats-server "+name, path, nil, "-c", conf)
	t.Cleanup(func() { p.terminate(stopTimeout) })
	_, err := p.awaitStderr(serverReady, startTimeout)
	require.NoError(t, err, "nats-server %s; stderr:\n%s", name, p.stderr.String())
	return "nats://127.0.0.1:" + strconv.Itoa(port)
}

// TestWorkerWithJetStreamExitsWhenTheStreamLeaderIsOlderThan2_11 runs a
// cluster in the middle of an upgrade: the worker connects to a 2.15
// server (the version pre-check passes), but the bucket's stream leader is
// a 2.10 server, which ignores the fence. The probe write finds it out.
func TestWorkerWithJetStreamExitsWhenTheStreamLeaderIsOlderThan2_11(t *testing.T) {
	ports := []int{freePort(t), freePort(t), freePort(t), freePort(t)}
	newURL := startClusterMember(t, bin.natsServer, "new", ports[0], ports[1], ports[3])
	oldURL := startClusterMember(t, oldNATSServer(t), "old", ports[2], ports[3], ports[1])

	// The workers' bucket, placed on the old server, as they would create
	// it; and another one on the new server.
	nc, err := nats.Connect(oldURL, nats.Timeout(startTimeout))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	createPlacedBucket(t, js, jsBucket, "old")
	createPlacedBucket(t, js, "fenced", "new")

	// On the new server's bucket, a worker serves.
	w := startJSWorkers(t, newURL, 1, "--kv-bucket", "fenced")[0]
	assert.Equal(t, 0, w.Stop())

	p := startProcess(t, "worker", bin.worker, nil, "--nats-url", newURL, "--kv", "jetstream")
	code, ok := p.wait(3 * startTimeout)
	require.True(t, ok, "the worker did not exit; stderr:\n%s", p.stderr.String())
	stderr := p.stderr.String()
	assert.Equal(t, 1, code, "exit code; stderr:\n%s", stderr)
	lines := linesMatching(stderr, regexp.MustCompile(`the stream leader of bucket flow_state \(server old\) stored a write fenced on a sequence number `+
		`that its epoch key does not have: it does not enforce subject-fenced writes `+
		`\(Nats-Expected-Last-Subject-Sequence-Subject; connected to nats-server 2\.15\.\d+\); `+
		`a shared state needs nats-server 2\.11 or newer on every server`))
	assert.Len(t, lines, 1, "one line naming both versions; stderr:\n%s", stderr)
	assert.NotContains(t, stderr, "panic")
}

// createPlacedBucket creates bucket on the cluster member tagged tag, with
// the settings a worker gives it, once JetStream has elected its meta
// leader. A two-server cluster elects it only when both servers answer in
// time, which on a loaded machine may take a few rounds.
func createPlacedBucket(t testing.TB, js jetstream.JetStream, bucket, tag string) {
	t.Helper()
	// 100 ms between tries: no meta leader yet.
	wait.Until(t, 9*startTimeout, 100*time.Millisecond, func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), requestTimeout)
		defer cancel()
		_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: bucket, History: 1, Storage: jetstream.MemoryStorage, Replicas: 1,
			Placement: &jetstream.Placement{Tags: []string{tag}},
		})
		return err == nil, fmt.Sprintf("create bucket %s on %s: %v", bucket, tag, err)
	})
	stream, err := js.Stream(t.Context(), "KV_"+bucket)
	require.NoError(t, err)
	require.NotNil(t, stream.CachedInfo().Cluster)
	require.Equal(t, tag, stream.CachedInfo().Cluster.Leader, "the stream leader of %s", bucket)
}
