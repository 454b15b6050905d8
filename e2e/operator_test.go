package e2e

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The mistakes an operator makes next, each answered with the flag, the
// variable that set it and the way out, in one line, before anything runs.
func TestStartUpMistakesNameTheFlagTheVariableAndTheWayOut(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })
	takenAddr := taken.Addr().String()
	nowhere := "127.0.0.1:" + strconv.Itoa(freePort(t))

	for _, tc := range []struct {
		outcome string
		args    []string
		env     []string
		code    int
		want    []string
	}{
		{"a backend misspelt in a variable", nil, []string{"FLOWSTATE_KV=jetsream"}, 2, []string{`"jetsream"`, "FLOWSTATE_KV"}},
		{"a duration without a unit", []string{"--publish-interval", "100"}, nil, 2, []string{"-publish-interval", "100ms"}},
		{"a variable's duration without a unit", nil, []string{"FLOWSTATE_PUBLISH_INTERVAL=100"}, 2, []string{"FLOWSTATE_PUBLISH_INTERVAL", "--publish-interval", "100ms"}},
		{"replicas with the memory backend", []string{"--kv-replicas", "3"}, nil, 2, []string{"--kv-replicas", "--kv jetstream"}},
		{"a bucket from a variable with the memory backend", nil, []string{"FLOWSTATE_KV_BUCKET=mine"}, 2, []string{"FLOWSTATE_KV_BUCKET", "--kv jetstream"}},
		{"a server address without a scheme", []string{"--nats-url", nowhere}, nil, 2, []string{"no scheme", "nats://" + nowhere}},
		{"a taken embedded port", []string{"--listen", takenAddr}, nil, 1, []string{"address already in use", "--listen 127.0.0.1:0", "--nats-url nats://" + takenAddr}},
		{"full updates more often than publishes", []string{"--full-interval", "10ms"}, nil, 2, []string{"--full-interval", "--publish-interval"}},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			t.Parallel()
			args := tc.args
			if !strings.Contains(strings.Join(args, " "), "--listen") {
				args = append([]string{"--listen", "127.0.0.1:0"}, args...) // never port 4222
			}
			code, _, stderr := runToExit(t, tc.env, args...)
			assert.Equal(t, tc.code, code, stderr)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			last := lines[len(lines)-1]
			for _, w := range tc.want {
				assert.Contains(t, last, w, "the line that says why")
			}
			if tc.code == 2 {
				assert.Len(t, lines, 1, "one line")
			}
		})
	}
}

// A worker asked for --kv jetstream on a server without JetStream says so
// at once, with the way to enable it, and exits 1: no retries, no
// "context deadline exceeded".
func TestJetStreamNotEnabledExitsAtOnceSayingSo(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	code, _, stderr := runToExit(t, nil, "--nats-url", srv.URL, "--kv", "jetstream")
	assert.Equal(t, 1, code, stderr)
	failed := startFailed.FindAllString(stderr, -1)
	require.Len(t, failed, 1, stderr)
	assert.Contains(t, failed[0], "has no JetStream: start nats-server with -js")
	assert.NotContains(t, stderr, "context deadline exceeded")
	assert.NotContains(t, stderr, "retrying")
}

// worker bench refuses a state that already holds nodes, naming the nodes
// it would overwrite and --force, and changes nothing.
func TestBenchRefusesAStateThatHoldsNodes(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL)
	c := newClient(t, w)
	real := map[uint64]flowState{}
	for _, node := range []uint64{7, 8, 9} {
		real[node] = lastExec(map[uint32]int64{uint32(node): 1700000000000})
		c.report(node, codecReport(node, real[node]))
	}
	want := aggregateOf(real)
	before := c.requireState(want)

	p := startProcess(t, "worker bench", bin.worker, nil, "bench", "--nats-url", srv.URL,
		"--nodes", "20", "--flows", "2", "--rate", "200", "--duration", "500ms")
	code, ok := p.wait(startTimeout)
	if !ok {
		p.terminate(stopTimeout)
	}
	require.True(t, ok, "bench did not exit; stderr:\n%s", p.stderr.String())
	assert.Equal(t, 1, code)
	stderr := p.stderr.String()
	assert.Contains(t, stderr, "overwrite the reports of nodes 7, 8, 9")
	assert.Contains(t, stderr, "--force")
	assert.Equal(t, before, c.requireState(want), "the state is the real nodes', at the same revision")
}

// revisionsOf returns the revisions of the messages sub received.
func revisionsOf(t testing.TB, msgs []aggregateMsg) []uint64 {
	t.Helper()
	var revs []uint64
	for _, m := range msgs {
		revs = append(revs, m.Revision)
	}
	return revs
}

// With --full-interval, deltas follow every change and full updates go out
// at most once per interval: the first change at once, the last one once
// the interval has passed.
func TestFullUpdatesKeepTheirOwnInterval(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--publish-interval", "0", "--full-interval", "3s")
	c := newClient(t, w)
	full := c.subscribeUpdates()
	deltas, err := c.nc.SubscribeSync(c.prefix + ".state.delta")
	require.NoError(t, err)
	require.NoError(t, c.nc.Flush())

	var revs []uint64
	for node := uint64(1); node <= 4; node++ {
		revs = append(revs, c.report(node, codecReport(node, lastExec(map[uint32]int64{uint32(node): 1}))).Revision)
	}
	for _, rev := range revs {
		msg, err := deltas.NextMsg(messageTimeout)
		require.NoError(t, err, "a delta for revision %d", rev)
		assert.Equal(t, strconv.FormatUint(rev, 10), msg.Header.Get(hdrRevision))
	}
	got := full.until(revs[3])
	assert.Equal(t, []uint64{revs[0], revs[3]}, revisionsOf(t, got), "full updates: the first change, then the last")
}
