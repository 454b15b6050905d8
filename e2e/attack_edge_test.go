package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The attacks of issue 11 on the worker's edge: its start-up checks, its
// signals and its metrics port. Each is bounded in time and size.

// TestStartUpRefusalsExitWithTheirStatus requires each refused command line
// to exit at once with its status and one line that names the cause.
func TestStartUpRefusalsExitWithTheirStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	badCreds := filepath.Join(dir, "bad.creds")
	require.NoError(t, os.WriteFile(badCreds, []byte("-----BEGIN NATS USER JWT-----\nnot-a-jwt\n------END NATS USER JWT------\n"), 0o600))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { taken.Close() })
	// Nothing listens there: a worker that tried to connect would retry.
	deadURL := "nats://127.0.0.1:" + strconv.Itoa(freePort(t))
	for _, tc := range []struct {
		outcome string
		code    int
		args    []string
		env     []string
		want    string
	}{
		{"non-loopback listen", 2, []string{"--listen", "0.0.0.0:0"}, nil, "--listen-insecure"},
		{"nats-url of a comma alone", 2, []string{"--nats-url", ","}, nil, "empty entry"},
		{"embedded server with a user", 2, []string{"--listen", "127.0.0.1:0", "--nats-user", "ops"}, []string{"FLOWSTATE_NATS_PASSWORD=x"}, "without --nats-url"},
		{"embedded server with a token", 2, []string{"--listen", "127.0.0.1:0"}, []string{"FLOWSTATE_NATS_TOKEN=x"}, "without --nats-url"},
		{"dead letters on the heartbeats", 2, []string{"--listen", "127.0.0.1:0", "--dead-letter-subject", "flow.heartbeat.5"}, nil, "loop"},
		{"malformed credentials", 1, []string{"--nats-url", deadURL, "--nats-creds", badCreds}, nil, "--nats-creds"},
		{"taken listen port", 1, []string{"--listen", taken.Addr().String()}, nil, taken.Addr().String()},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			code, stdout, stderr := runToExit(t, tc.env, tc.args...)
			t.Logf("exit %d after %v", code, time.Since(start).Round(time.Millisecond))
			assert.Equal(t, tc.code, code, "exit status; stderr:\n%s", stderr)
			assert.Contains(t, stderr, tc.want)
			assert.Empty(t, stdout)
			if tc.code == 2 {
				assert.Equal(t, 1, bytes.Count([]byte(stderr), []byte("\n")), "one line: %q", stderr)
			}
		})
	}
}

// embeddedWorker runs a worker with its embedded server on a free port of
// 127.0.0.1 and waits until it serves.
func embeddedWorker(t *testing.T, args ...string) *workerProc {
	t.Helper()
	w := launchWorker(t, nil, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	w.URL = w.waitStderr(embeddedListening)[1]
	w.awaitReady()
	return w
}

// TestPProfIsOffByDefault requires /debug/pprof/ to answer 404 without
// --pprof, and 200 with it.
func TestPProfIsOffByDefault(t *testing.T) {
	t.Parallel()
	httpc := &http.Client{Timeout: requestTimeout}
	for flag, want := range map[string]int{"--pprof=false": http.StatusNotFound, "--pprof": http.StatusOK} {
		w := embeddedWorker(t, "--metrics-addr", "127.0.0.1:0", flag)
		addr := w.waitStderr(metricsListening)[1]
		resp, err := httpc.Get("http://" + addr + "/debug/pprof/")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, flag)
	}
}

// TestIdleMetricsConnectionsAreCapped opens many idle connections to the
// metrics port and requires /readyz to answer and the worker to hold a
// bounded number of file descriptors.
func TestIdleMetricsConnectionsAreCapped(t *testing.T) {
	t.Parallel()
	w := embeddedWorker(t, "--metrics-addr", "127.0.0.1:0")
	addr := w.waitStderr(metricsListening)[1]
	const idle = 1000
	conns := make([]net.Conn, 0, idle)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range idle {
		c, err := net.DialTimeout("tcp", addr, requestTimeout)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	httpc := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := httpc.Get("http://" + addr + "/readyz")
	require.NoError(t, err, "/readyz with %d idle connections open", idle)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	t.Logf("/readyz answered in %v with %d idle connections open", time.Since(start).Round(time.Millisecond), idle)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", w.p.cmd.Process.Pid))
	require.NoError(t, err)
	t.Logf("worker file descriptors: %d", len(fds))
	assert.Less(t, len(fds), idle/2, "the worker does not hold every idle connection")
}

// TestSighupIsIgnored sends SIGHUP and requires the worker to log it, keep
// serving, and exit 0 on SIGTERM.
func TestSighupIsIgnored(t *testing.T) {
	t.Parallel()
	w := embeddedWorker(t)
	w.p.signal(syscall.SIGHUP)
	w.waitStderr(regexp.MustCompile(`msg="signal ignored" signal=hangup`))
	c := newClient(t, w)
	c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 1})))
	c.requireState(lastExec(map[uint32]int64{1: 1}))
	assert.Equal(t, 0, w.Stop())
}

// TestClosedStderrAndABadReportDoNotKill runs the worker with stderr on a
// pipe, closes the pipe's reading end, sends bad reports (logged) and
// requires the worker to keep acking and to exit 0 on SIGTERM.
func TestClosedStderrAndABadReportDoNotKill(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	r, wr, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(bin.worker, "--listen", "127.0.0.1:"+strconv.Itoa(port))
	cmd.Env = cleanEnv()
	cmd.Stderr = wr
	require.NoError(t, cmd.Start())
	wr.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	listening := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		lines := bufio.NewScanner(r)
		for lines.Scan() {
			if embeddedListening.MatchString(lines.Text()) {
				close(listening)
				break
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case <-listening:
	case <-time.After(startTimeout):
		require.Fail(t, "the worker did not log its embedded server's URL")
	}
	w := &workerProc{t: t, p: &process{name: "worker", cmd: cmd, done: done}, URL: url, Prefix: "flow"}
	w.awaitReady()
	r.Close() // the reader goes away
	<-read

	c := newClient(t, w)
	for i := range 20 {
		c.reject(c.heartbeatSubject(uint64(i+1)), []byte{0xc1}) // never valid msgpack
	}
	c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 1})))
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-done:
	case <-time.After(stopTimeout):
		require.Fail(t, "worker did not exit after SIGTERM")
	}
	assert.Equal(t, 0, cmd.ProcessState.ExitCode(), "exit status (-1: killed by a signal): %v", cmd.ProcessState)
}

// TestSigtermUnderAFloodExitsZero floods the worker with reports, sends
// SIGTERM, and requires it to exit 0 by itself; the time it takes is
// logged, not asserted.
func TestSigtermUnderAFloodExitsZero(t *testing.T) {
	t.Parallel()
	w := embeddedWorker(t)
	u := newClient(t, w).subscribeUpdates()
	const publishers, nodes, flows = 4, 500, 100
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range publishers {
		nc := connect(t, w.URL, nats.ReconnectBufSize(-1))
		// Reports of 100 flows each, encoded once: the flood goes as fast
		// as the connection takes it, about 2 KB a report.
		bodies := make([][]byte, nodes)
		for i := range bodies {
			node := uint64(p*nodes + i + 1)
			fl := map[uint32]int64{}
			for f := range flows {
				fl[uint32(int(node)*flows+f)] = int64(node)
			}
			bodies[i] = codecReport(node, lastExec(fl))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				node := p*nodes + i%nodes + 1
				if nc.Publish(w.Prefix+".heartbeat."+strconv.Itoa(node), bodies[i%nodes]) != nil {
					return
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
	// The flood is on when the worker has applied some of it.
	for u.next().version.Revision < 1000 {
	}
	sigAt := time.Now()
	w.p.signal(syscall.SIGTERM)
	code, ok := w.p.wait(stopTimeout)
	require.True(t, ok, "worker did not exit within %v of SIGTERM under a flood; stderr:\n%s", stopTimeout, w.Stderr())
	t.Logf("exit %d %v after SIGTERM under a flood", code, w.p.exitAt.Sub(sigAt).Round(time.Millisecond))
	assert.Equal(t, 0, code, "exit status; stderr:\n%s", w.Stderr())
}
