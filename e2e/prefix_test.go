package e2e

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/proctest"
)

// leaveTimeout bounds the wait for one of two workers with different
// states, started together, to leave: a look every 5 s (±20%), its replies
// gathered for up to 1 s, a shutdown, and a JetStream worker's wait for its
// bucket on a loaded machine. PROTOCOL.md's "a few seconds"; the figures are logged.
const leaveTimeout = 15 * time.Second

// onBucket are the flags of a JetStream worker on bucket.
func onBucket(bucket string) []string { return []string{"--kv", "jetstream", "--kv-bucket", bucket} }

// notConnectedYet is the line of a worker that starts before its server.
var notConnectedYet = regexp.MustCompile(`NATS not connected yet`)

// startFailed matches the line a worker that does not start ends with.
var startFailed = regexp.MustCompile(`(?m)^.*level=ERROR msg="start failed".*$`)

// statePairs are pairs of workers of one prefix that hold two states.
var statePairs = []struct {
	name          string
	first, second []string
	names         string // how the second's refusal names the first's state
	advice        string // what it says to do
}{
	{"memory beside memory", nil, nil, "(memory;", "--kv jetstream"},
	{"memory beside jetstream", onBucket("flow_state"), nil, "(jetstream, bucket flow_state;", "--kv jetstream"},
	{"jetstream beside memory", nil, onBucket("flow_state"), "(memory;", "--kv jetstream"},
	{"jetstream on another bucket", onBucket("flow_state"), onBucket("other"), "(jetstream, bucket flow_state;", "--kv-bucket flow_state"},
}

// A worker that finds, at start-up, a worker of its prefix with another
// state exits 1 with one line naming that worker and what to do; the
// first one goes on serving. A worker of another prefix starts.
func TestAWorkerBesideAnotherStateOfItsPrefixExitsAtStart(t *testing.T) {
	t.Parallel()
	for _, tc := range statePairs {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startJetStreamServer(t)
			first := startWorker(t, srv.URL, tc.first...)

			code, _, stderr := runToExit(t, nil, append([]string{"--nats-url", srv.URL}, tc.second...)...)
			assert.Equal(t, 1, code, stderr)
			failed := startFailed.FindAllString(stderr, -1)
			require.Len(t, failed, 1, "one line says why; stderr:\n%s", stderr)
			assert.Contains(t, failed[0], "another state serves this prefix")
			assert.Contains(t, failed[0], "service "+first.ID, "it names the other worker")
			assert.Contains(t, failed[0], tc.names)
			assert.Contains(t, failed[0], tc.advice)
			assert.Contains(t, failed[0], "another --prefix")
			assert.NotContains(t, stderr, "bucket created", "it refuses before it touches a bucket")

			requireServes(t, newClient(t, first), 1)
			startWorker(t, srv.URL, append([]string{"--prefix", "elsewhere"}, tc.second...)...)
		})
	}
}

// startServerLater runs nats-server with JetStream on port, for workers
// launched before it: they connect together once it is up.
func startServerLater(t testing.TB, port int) *natsServer {
	t.Helper()
	args := []string{"-js", "-sd", t.TempDir()}
	srv, err := proctest.StartServer(proctest.ServerSpec{Path: bin.natsServer, Port: port, Args: args, SeparateStdout: true})
	require.NoError(t, err, "nats-server on port %d", port)
	s := serverOf(t, srv, args)
	t.Cleanup(func() { s.p.terminate(stopTimeout) })
	return s
}

// Two workers of one prefix with different states, started together, end
// with one serving: the one started later leaves with exit status 1,
// naming the other, and from then on every get shows the survivor's epoch.
// They are launched before their server, so that both pass the look at
// start-up (not connected yet) and meet at run time.
func TestTwoStatesStartedTogetherLeaveOne(t *testing.T) {
	t.Parallel()
	for _, pair := range []struct {
		name          string
		first, second []string
	}{
		{"two memory workers", nil, nil},
		{"memory and jetstream", nil, onBucket("flow_state")},
		{"jetstream on two buckets", onBucket("flow_state"), onBucket("other")},
	} {
		t.Run(pair.name, func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			url := "nats://127.0.0.1:" + strconv.Itoa(port)
			a := launchWorker(t, nil, append([]string{"--nats-url", url}, pair.first...)...)
			b := launchWorker(t, nil, append([]string{"--nats-url", url}, pair.second...)...)
			a.waitStderr(notConnectedYet)
			b.waitStderr(notConnectedYet)
			startServerLater(t, port)
			launched := time.Now()

			var gone, survivor *workerProc
			select {
			case <-a.p.done:
				gone, survivor = a, b
			case <-b.p.done:
				gone, survivor = b, a
			case <-time.After(leaveTimeout):
				require.Failf(t, "both serve", "no worker left within %v; stderr:\n%s\n---\n%s", leaveTimeout, a.Stderr(), b.Stderr())
			}
			gone.killed = true // it exits by itself, with 1
			assert.Equal(t, 1, gone.p.code, gone.Stderr())
			t.Logf("one worker left %v after their server started", gone.p.exitAt.Sub(launched).Round(time.Millisecond))
			assert.Contains(t, gone.Stderr(), "this worker started later, so it stops consuming and exits")

			survivor.awaitReady()
			assert.Contains(t, gone.Stderr(), "service "+survivor.ID, "it names the worker that stays")
			c := newClient(t, survivor)
			ack := c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 1})))
			for range 20 {
				assert.Equal(t, ack.Epoch, c.get().Epoch, "a get after one left shows the other's state")
			}
			assert.False(t, survivor.p.exited(), "the worker started first stays; stderr:\n%s", survivor.Stderr())
		})
	}
}
