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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, goTool(), "build", "-o", oldServer.path, "github.com/nats-io/nats-server/v2")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			oldServer.err = fmt.Errorf("go build nats-server %s: %w\n%s", oldServerVersion, err, out)
		}
	})
	require.NoError(t, oldServer.err)
	return oldServer.path
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
