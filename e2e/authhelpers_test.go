package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/proctest"
	"github.com/flowstate-io/flowstate/internal/wait"
)

// confServer is a nats-server process that runs with a configuration file,
// which a test can rewrite and reload.
type confServer struct {
	*natsServer
	path    string // the configuration file
	reloads int    // reloads done so far
}

// serverReloaded is the line nats-server logs after a reload.
var serverReloaded = regexp.MustCompile(`Reloaded server configuration`)

// listenConf is the first line of every configuration: 127.0.0.1 only. The
// harness also passes -a and -p, which win over the file; both name the
// same address.
func listenConf(port int) string {
	return fmt.Sprintf("listen: 127.0.0.1:%d\n", port)
}

// startConfServer runs nats-server with a configuration file written by
// conf (after listenConf) on a free port of 127.0.0.1, and waits until a
// client with opts can connect. scheme is "nats" or "tls". Cleanup stops it.
func startConfServer(t testing.TB, scheme string, conf string, opts ...nats.Option) *confServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	args := []string{"-c", path}
	var errs []error
	var srv *proctest.Server
	for range 3 {
		port := freePort(t)
		writeFile(t, path, listenConf(port)+conf)
		var err error
		if srv, err = proctest.StartServer(proctest.ServerSpec{Path: bin.natsServer, Port: port, Args: args, SeparateStdout: true}); err == nil {
			break
		}
		errs = append(errs, err) // the port was taken, most likely
	}
	require.NotNil(t, srv, "nats-server did not start with %s: %v", path, errors.Join(errs...))
	s := &confServer{natsServer: serverOf(t, srv, args), path: path}
	s.URL = scheme + "://127.0.0.1:" + strconv.Itoa(s.port)
	t.Cleanup(func() { s.p.terminate(stopTimeout) })
	require.NoError(t, s.connectErr(opts...), "connect to nats-server at %s; stderr:\n%s", s.URL, s.p.stderr.String())
	return s
}

// connectErr connects a client with opts, once, without reconnecting, and
// returns the error; a connection made is closed.
func (s *confServer) connectErr(opts ...nats.Option) error {
	nc, err := nats.Connect(s.URL, append([]nats.Option{nats.Timeout(startTimeout), nats.NoReconnect()}, opts...)...)
	if err == nil {
		nc.Close()
	}
	return err
}

// reload rewrites the configuration with conf, sends SIGHUP and waits
// until the server has reloaded it.
func (s *confServer) reload(conf string) {
	s.t.Helper()
	writeFile(s.t, s.path, listenConf(s.port)+conf)
	s.reloads++
	s.p.signal(syscall.SIGHUP)
	awaitCount(s.t, s.p, serverReloaded, s.reloads, startTimeout)
}

// writeFile writes a file that only the test's user can read, as secrets
// should be.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

// awaitCount waits until re matches at least n times in p's stderr and
// returns the number of matches. It fails the test when p exits first or
// the wait exceeds timeout.
func awaitCount(t testing.TB, p *process, re *regexp.Regexp, n int, timeout time.Duration) int {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s, changed := p.stderr.snapshot()
		if got := len(re.FindAllStringIndex(s, -1)); got >= n {
			return got
		}
		select {
		case <-changed:
		case <-p.done:
			require.FailNowf(t, "process exited", "%s exited with code %d before %q appeared %d times; stderr:\n%s", p.name, p.code, re, n, p.stderr.String())
		case <-deadline.C:
			require.FailNowf(t, "timeout", "%s: %q did not appear %d times within %v; stderr:\n%s", p.name, re, n, timeout, s)
		}
	}
}

// linesMatching returns the lines of s that re matches.
func linesMatching(s string, re *regexp.Regexp) []string {
	var out []string
	for line := range strings.Lines(s) {
		if re.MatchString(line) {
			out = append(out, strings.TrimRight(line, "\n"))
		}
	}
	return out
}

// dialClient connects a client of worker w with opts to w's server (nats://
// or tls:// on 127.0.0.1). Cleanup closes it.
func dialClient(t testing.TB, w *workerProc, opts ...nats.Option) *client {
	t.Helper()
	require.Regexp(t, `^(nats|tls)://127\.0\.0\.1:\d+$`, w.URL, "tests only talk to 127.0.0.1")
	nc, err := nats.Connect(w.URL, append([]nats.Option{nats.Timeout(startTimeout)}, opts...)...)
	require.NoError(t, err, "client connect to %s", w.URL)
	t.Cleanup(nc.Close)
	return &client{t: t, nc: nc, prefix: w.Prefix}
}

// awaitServing sends gets through c until the worker answers one: the
// harness's awaitReady cannot authenticate. Every get is bounded, and so is
// the whole wait; the worker must stay up meanwhile.
func awaitServing(t testing.TB, w *workerProc, c *client) {
	t.Helper()
	var msg *nats.Msg
	wait.Until(t, startTimeout, 20*time.Millisecond, func() (bool, string) {
		var err error
		msg, err = c.nc.Request(c.prefix+".state.get", nil, time.Second)
		if err == nil {
			return true, ""
		}
		require.False(t, w.p.exited(), "worker exited with code %d; stderr:\n%s", w.p.code, w.Stderr())
		return false, fmt.Sprintf("worker did not answer a get: %v; stderr:\n%s", err, w.Stderr())
	})
	parseAggregateMsg(t, msg)
}

// requireServes sends a report as a request through c, requires an ack,
// and a get that returns the report at the acked version.
func requireServes(t testing.TB, c *client, node uint64) {
	t.Helper()
	s := flowState{StateSize: map[uint32]uint64{uint32(node): 1024}, LastExecTime: map[uint32]int64{uint32(node): 1700000000000}}
	ack := c.report(node, codecReport(node, s))
	assert.Equal(t, ack, c.requireState(s), "the get returns the acked report")
}

// requireNotOnCommandLine requires that secret appears neither in the
// worker's arguments as the kernel shows them to every user (ps) nor in
// its log.
func requireNotOnCommandLine(t testing.TB, w *workerProc, secret string) {
	t.Helper()
	args := strings.Join(w.p.cmd.Args, " ")
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w.p.cmd.Process.Pid)); err == nil {
		args = strings.ReplaceAll(string(b), "\x00", " ")
	}
	require.NotEmpty(t, args)
	assert.NotContains(t, args, secret, "the secret is on the worker's command line")
	assert.NotContains(t, w.Stderr(), secret, "the secret is in the worker's log")
}
