package e2e

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/proctest"
	"github.com/flowstate-io/flowstate/internal/wait"
)

// natsCluster is three nats-server processes with JetStream, routed to each
// other on loopback.
type natsCluster struct {
	servers []*natsServer // servers[i] is named s<i>
	URLs    string        // every client URL, comma-separated
}

// startCluster runs three clustered servers and waits until JetStream has a
// meta leader.
func startCluster(t testing.TB) *natsCluster {
	t.Helper()
	pc, err := proctest.StartCluster(proctest.ClusterSpec{Path: bin.natsServer, Name: "flowstate",
		StoreDir: func(int) string { return t.TempDir() }})
	require.NoError(t, err)
	c := &natsCluster{URLs: strings.Join(pc.URLs(), ",")}
	for _, srv := range pc.Servers {
		s := serverOf(t, srv, nil)
		t.Cleanup(func() { s.p.terminate(stopTimeout) })
		c.servers = append(c.servers, s)
	}
	require.NoError(t, pc.AwaitJetStream(30*time.Second))
	return c
}

// server returns the server named name.
func (c *natsCluster) server(t testing.TB, name string) *natsServer {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(name, "s"))
	require.NoError(t, err, "server name %q", name)
	return c.servers[i]
}

// kill stops a server with SIGKILL.
func (s *natsServer) kill() {
	s.p.signal(syscall.SIGKILL)
	<-s.p.done
}

// TestJetStreamClusterKeepsServingWhenAServerDies runs three workers on an
// R3 bucket of a three-server cluster while 100 nodes report. Killing a
// server, the workers keep acking and serving. Killing the bucket's leader
// as well (no quorum), a report is answered 503 quickly and gets are still
// served. Once both are back, the workers ack again by themselves, and the
// state is exactly each node's last acked report.
func TestJetStreamClusterKeepsServingWhenAServerDies(t *testing.T) {
	t.Parallel()
	cl := startCluster(t)
	ws := startJSWorkers(t, cl.URLs, 3, "--kv-replicas", "3", "--kv-storage", "file", "--log-level", "debug")
	// The client knows every server, as flownodes should.
	c := newClient(t, ws[0], nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), func(o *nats.Options) error {
		o.Servers = strings.Split(cl.URLs, ",")
		return nil
	})
	js, err := jetstream.New(c.nc)
	require.NoError(t, err)
	stream, err := js.Stream(t.Context(), "KV_"+jsBucket)
	require.NoError(t, err)
	info := stream.CachedInfo()
	require.Equal(t, 3, info.Config.Replicas)
	epoch := c.get().Epoch

	r := startReporters(t, c, 100, 20*time.Millisecond)
	r.awaitAcks(300, 30*time.Second)

	// A server that does not lead the bucket dies: the workers keep acking
	// and serving (those connected to it reconnect to another one).
	leader := cl.server(t, info.Cluster.Leader)
	var first *natsServer
	for _, s := range cl.servers {
		if s != leader && first == nil {
			first = s
		}
	}
	killed, failedBefore := time.Now(), r.failed.Load()
	first.kill()
	r.awaitAcks(300, 30*time.Second)
	t.Logf("300 reports acked %v after a server died; %d retried meanwhile %s", time.Since(killed), r.failed.Load()-failedBefore, r.failures())
	// Gets are served. A worker whose watch read from the dead server
	// answers 503 until its consumer is recreated on another one (after two
	// missed idle heartbeats, 2 to 4 s): the client asks again, as a
	// frontend does.
	awaitGet(t, c, 30*time.Second)

	// The bucket's leader dies too: no quorum, no writes.
	leader.kill()
	survivor := cl.servers[0]
	for _, s := range cl.servers {
		if s != leader && s != first {
			survivor = s
		}
	}
	// Each worker finds out with its first write, which waits for
	// JetStream up to its op timeout (2 s); then it answers 503 at once:
	// ten requests in a row, each bounded by a quarter of the op timeout,
	// are answered 503. A request the bound cuts short starts the run over.
	probe := connect(t, survivor.URL)
	body := codecReport(1000, lastExec(map[uint32]int64{1: 1})) // changes no aggregate
	const quick = 500 * time.Millisecond
	fast := 0
	wait.Until(t, 30*time.Second, 0, func() (bool, string) {
		msg, err := probe.Request(c.heartbeatSubject(1000), body, quick)
		switch {
		case errors.Is(err, nats.ErrTimeout):
			fast = 0
			return false, fmt.Sprintf("a report not answered within %v", quick)
		case err != nil:
			return false, fmt.Sprintf("a worker's connection moving: %v", err)
		case msg.Header.Get(micro.ErrorCodeHeader) != "503":
			return false, "a report acked before the quorum was noticed lost"
		}
		fast++
		return fast == 10, fmt.Sprintf("%d quick 503s in a row", fast)
	})
	// Without quorum no worker can tell that its state holds every acked
	// report (its read barrier cannot pass): a get answers 503, never an
	// old state.
	msg, err := probe.Request(c.prefix+".state.get", nil, requestTimeout)
	require.NoError(t, err)
	assert.Equal(t, "503", msg.Header.Get(micro.ErrorCodeHeader), "a get without quorum")

	// Both come back: the workers recover by themselves.
	first.Restart()
	leader.Restart()
	back := time.Now()
	r.awaitAcks(300, 60*time.Second)
	t.Logf("300 reports acked %v after quorum came back", time.Since(back))
	r.stopAndWait()

	for e := range r.epochs() {
		assert.Equal(t, epoch, e, "every ack is in the one epoch")
	}
	// A worker whose watch was cut off by the outage answers 503 until its
	// read barrier passes again: wait, bounded, until every worker serves
	// the final state, and say how long it took.
	converging := time.Now()
	awaitConverged(t, c, r.want(), 20, 60*time.Second)
	t.Logf("every worker served the final state %v after the last ack", time.Since(converging))
	v := requireConverged(t, c, r.want(), 20)
	assert.Equal(t, epoch, v.Epoch)
	t.Logf("%d reports acked, %d retried %s", r.acked(), r.failed.Load(), r.failures())
}

// awaitGet sends gets until one is answered with the state, within timeout;
// a 503 (a worker whose read barrier cannot pass yet) is asked again.
func awaitGet(t testing.TB, c *client, timeout time.Duration) {
	t.Helper()
	wait.Until(t, timeout, 50*time.Millisecond, func() (bool, string) {
		msg, err := c.nc.Request(c.prefix+".state.get", nil, requestTimeout)
		if err != nil {
			return false, fmt.Sprintf("no get answered: %v", err)
		}
		code := msg.Header.Get(micro.ErrorCodeHeader)
		if code != "" {
			require.Equal(t, "503", code, "only 503 while a worker catches up: %s", msg.Header.Get(micro.ErrorHeader))
		}
		return code == "", "no get answered with the state: 503"
	})
}

// TestJetStreamWorkerStartsWhileTheStreamLeaderRestarts starts workers
// right after the bucket stream's leader was restarted, as a rolling
// restart of servers and workers does: JetStream then answers that it is
// electing ("JetStream system temporarily unavailable"), times out, or has
// no leader for the stream yet. Each worker retries those within its
// start-up bound and serves; none exits.
func TestJetStreamWorkerStartsWhileTheStreamLeaderRestarts(t *testing.T) {
	t.Parallel()
	cl := startCluster(t)
	args := []string{"--kv-replicas", "3", "--kv-storage", "file"}
	startJSWorkers(t, cl.URLs, 1, args...) // creates the bucket
	nc, err := nats.Connect(cl.URLs, nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for round := range 3 {
		leader := awaitStreamLeader(t, js)
		s := cl.servers[leader]
		s.kill()
		require.NoError(t, s.srv.Restart())
		s.p = wrapProcess(s.srv.Process)
		w := launchWorker(t, nil, append([]string{"--nats-url", s.URL, "--kv", "jetstream"}, args...)...)
		// Within the worker's own bound: it retries JetStream for up to 15 s
		// at start-up (an election after the leader's restart may take most
		// of it on a loaded machine), and its watch then loads the bucket.
		_, err := w.p.awaitStderr(regexp.MustCompile(`msg=serving`), 3*startTimeout)
		require.NoError(t, err, "round %d: the worker started after s%d, the stream's leader, restarted; stderr:\n%s", round, leader, w.Stderr())
	}
}

// awaitStreamLeader returns the index of the server that leads the
// bucket's stream, once there is one (30 s at most).
func awaitStreamLeader(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	leader := -1
	wait.Until(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		leader = proctest.StreamLeader(js, "KV_"+jsBucket, 2*time.Second)
		return leader >= 0, "the bucket's stream has no leader"
	})
	return leader
}
