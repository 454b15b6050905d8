package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/wait"
)

// serviceName is the NATS micro service name the worker registers.
const serviceName = "flowstate"

// workerProc is a running worker binary.
type workerProc struct {
	t      testing.TB
	p      *process
	URL    string // the NATS server it serves on
	Prefix string // its subject prefix
	ID     string // its micro service id, from $SRV.PING
	killed bool   // Kill was called
}

// startWorker runs the worker against the NATS server at natsURL and waits
// until it answers $SRV.PING.flowstate. Cleanup stops it.
func startWorker(t testing.TB, natsURL string, extraArgs ...string) *workerProc {
	t.Helper()
	return startWorkerEnv(t, nil, append([]string{"--nats-url", natsURL}, extraArgs...)...)
}

// startWorkerEnv runs the worker with env added to the cleaned environment
// and exactly args, which must name the NATS server (by flag or env); it
// waits until the worker answers $SRV.PING.flowstate.
func startWorkerEnv(t testing.TB, env []string, args ...string) *workerProc {
	t.Helper()
	w := launchWorker(t, env, args...)
	if w.URL == "" {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "FLOWSTATE_NATS_URL="); ok {
				w.URL = v
			}
		}
	}
	require.NotEmpty(t, w.URL, "startWorkerEnv needs --nats-url or FLOWSTATE_NATS_URL")
	w.awaitReady()
	return w
}

// launchWorker starts the worker binary and registers its Cleanup; it does
// not wait.
func launchWorker(t testing.TB, env []string, args ...string) *workerProc {
	t.Helper()
	return launchWorkerBinary(t, bin.worker, env, args...)
}

// launchWorkerBinary is launchWorker with the worker binary at path (another
// release's, for the version skew test).
func launchWorkerBinary(t testing.TB, path string, env []string, args ...string) *workerProc {
	t.Helper()
	w := &workerProc{
		t:      t,
		URL:    flagValue(args, "nats-url"),
		Prefix: flagValue(args, "prefix"),
	}
	if w.Prefix == "" {
		w.Prefix = "flow"
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "FLOWSTATE_PREFIX="); ok {
				w.Prefix = v
			}
		}
	}
	w.p = startProcess(t, "worker", path, append(cleanEnv(), env...), args...)
	t.Cleanup(func() {
		code, ok := w.p.terminate(stopTimeout)
		stderr := w.p.stderr.String()
		assert.True(t, ok, "worker did not exit within %v of SIGTERM", stopTimeout)
		if !w.killed {
			assert.Equal(t, 0, code, "worker exit code")
		}
		assert.NotContains(t, stderr, "panic", "worker stderr")
		if t.Failed() {
			t.Logf("worker (exit code %d) stderr:\n%s", code, stderr)
		}
	})
	return w
}

// flagValue returns the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) string {
	v := ""
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name && i+1 < len(args) {
			v = args[i+1]
		} else if s, ok := strings.CutPrefix(a, name+"="); ok {
			v = s
		}
	}
	return v
}

// awaitReady pings $SRV.PING.flowstate until this worker answers. Several
// workers may share a server: a service is this worker when $SRV.INFO lists
// its get endpoint on <prefix>.state.get. Ids in skipIDs (workers that
// stopped) are ignored.
func (w *workerProc) awaitReady(skipIDs ...string) {
	w.t.Helper()
	nc, err := nats.Connect(w.URL, nats.Timeout(startTimeout))
	require.NoError(w.t, err)
	defer nc.Close()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(w.t, err)
	checked := map[string]bool{}
	for _, id := range skipIDs {
		checked[id] = true
	}
	// A round: one ping, and the replies of the next 25 ms (every service
	// answers).
	wait.Until(w.t, startTimeout, 0, func() (bool, string) {
		require.NoError(w.t, nc.PublishRequest("$SRV.PING."+serviceName, inbox, nil))
		round := time.Now().Add(25 * time.Millisecond)
		for {
			msg, err := sub.NextMsg(time.Until(round))
			if err != nil {
				break
			}
			if len(msg.Data) == 0 {
				continue // no responders yet
			}
			var ping micro.Ping
			require.NoError(w.t, json.Unmarshal(msg.Data, &ping), "PING reply %q", msg.Data)
			if ping.ID == "" || checked[ping.ID] {
				continue
			}
			if w.servesGet(nc, ping.ID) {
				w.ID = ping.ID
				return true, ""
			}
		}
		require.False(w.t, w.p.exited(), "worker exited with code %d before it was ready; stderr:\n%s", w.p.code, w.p.stderr.String())
		return false, fmt.Sprintf("worker did not answer $SRV.PING; stderr:\n%s", w.p.stderr.String())
	})
}

// servesGet reports whether the service with id lists this worker's get
// endpoint in $SRV.INFO.
func (w *workerProc) servesGet(nc *nats.Conn, id string) bool {
	msg, err := nc.Request("$SRV.INFO."+serviceName+"."+id, nil, requestTimeout)
	if err != nil {
		return false
	}
	var info micro.Info
	if json.Unmarshal(msg.Data, &info) != nil {
		return false
	}
	for _, e := range info.Endpoints {
		if e.Subject == w.Prefix+".state.get" {
			return true
		}
	}
	return false
}

// Stop sends SIGTERM and returns the exit code. It fails the test if the
// worker does not exit within stopTimeout.
func (w *workerProc) Stop() int {
	w.t.Helper()
	code, ok := w.p.terminate(stopTimeout)
	require.True(w.t, ok, "worker did not exit within %v of SIGTERM; stderr:\n%s", stopTimeout, w.p.stderr.String())
	return code
}

// Kill sends SIGKILL and waits for the process to exit.
func (w *workerProc) Kill() {
	w.killed = true
	w.p.signal(syscall.SIGKILL)
	<-w.p.done
}

// Stderr returns what the worker has logged so far.
func (w *workerProc) Stderr() string { return w.p.stderr.String() }

// waitStderr waits for a log line; see process.waitStderr.
func (w *workerProc) waitStderr(re *regexp.Regexp) []string {
	w.t.Helper()
	return w.p.waitStderr(w.t, re, startTimeout)
}
