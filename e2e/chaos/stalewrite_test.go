package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/proctest"
	"github.com/flowstate-io/flowstate/internal/wait"
)

// seqReport is report k of node n: flow n, state_size k, so that a get
// shows which report of the node it holds.
func seqReport(n uint64, k int) []byte {
	return codec.AppendReport(nil, seqReportOf(n, k))
}

func seqReportOf(n uint64, k int) *codec.Report {
	return &codec.Report{NodeID: n, Flows: []flowstate.Flow{{ID: flowstate.FlowID(n), Has: flowstate.HasStateSize, StateSize: uint64(k)}}}
}

// reportFn returns what a test sends as report k of node n, one call an
// attempt.
type reportFn func(n uint64, k int) []byte

// fastPings is the README's configuration for the servers of workers, ten
// times faster: a stalled route is closed within (ping_max+1) x
// ping_interval, 1.5 s.
const fastPings = `ping_interval: "500ms"
ping_max: 2
write_deadline: "1s"
`

// TestStalledRoutesCannotBringBackAnOlderReport: a flownode's server s0
// (no worker of its own, not the stream's leader) has its routes stalled.
// The node's report 2 is sent there: s0 routes the request to a worker on
// another server, so its bytes wait in a stalled route, and the flownode
// sees a timeout. The node's report 3 is then acked through s1. What the
// README promises of report 2 depends on how long the route stalled: a
// stalled route is closed within (ping_max+1) x ping_interval, and what
// it held is dropped; a report that was not acked may still be applied,
// once, until then, even after report 3, and the node's next heartbeat
// supersedes it.
func TestStalledRoutesCannotBringBackAnOlderReport(t *testing.T) {
	t.Run("past the ping bound the held request is dropped", func(t *testing.T) {
		r := stallFlownodeServer(t, fastPings)
		// Every route of s0 is closed, at both ends: what they held is gone.
		for i, want := range [][]string{nil, {"s2"}, {"s1"}} {
			awaitRoutePeers(t, r.s.cluster, i, want)
		}
		r.heal()
		for i, want := range [][]string{{"s1", "s2"}, {"s0", "s2"}, {"s0", "s1"}} {
			awaitRoutePeers(t, r.s.cluster, i, want)
		}
		// A marker from s0 after the heal reaches s1 and s2 over the new
		// routes; a held byte, had a route kept it, would have come first.
		r.awaitMarker(t)
		assert.Empty(t, r.reached(), "report 2 reached a worker's server after its route was closed")
		_, err := r.answers.NextMsg(100 * time.Millisecond)
		assert.ErrorIs(t, err, nats.ErrTimeout, "report 2 was answered after its route was closed")
		got := requireGetAt(t, r.healthy, r.third)
		assert.Equal(t, uint16(3), got.agg[r.node-1][0], "a get after report 3 was acked shows report %d", got.agg[r.node-1][0])
	})

	t.Run("within the ping bound the held request may land once", func(t *testing.T) {
		r := stallFlownodeServer(t, proctest.WorkerServerConfig)
		r.heal()
		late, err := r.answers.NextMsg(30 * time.Second)
		require.NoError(t, err, "the held request reaches a worker once the route flows again, which answers it")
		out := result(input{kind: opReport}, late, nil)
		t.Logf("report 3 acked at revision %d; report 2, held in s0's routes (it reached%v), answered after the heal: %s",
			r.third, r.reached(), describeLate(out, late))
		switch out.status {
		case stOK:
			// Applied after report 3, as the README allows within the bound.
			assert.Greater(t, out.rev, r.third)
			got := requireGetAt(t, r.healthy, out.rev)
			assert.Equal(t, uint16(2), got.agg[r.node-1][0], "acked at %d, after report 3", out.rev)
		case stUnknown:
			// Not stored: refused by its write's condition (the worker's
			// watch had not applied report 3 yet), or JetStream did not
			// answer (a leader change as s0 came back); it may still land.
		default:
			t.Errorf("report 2 answered %s", out.code)
		}
		fourth := requireAcked(t, r.healthy, r.node, 4, 30*time.Second)
		got := requireGetAt(t, r.healthy, fourth)
		assert.Equal(t, uint16(4), got.agg[r.node-1][0], "the next heartbeat supersedes the late report")
	})
}

// describeLate describes the answer to a report that came late.
func describeLate(out output, m *nats.Msg) string {
	if out.status == stOK {
		return fmt.Sprintf("acked at revision %d", out.rev)
	}
	return out.code + " " + m.Header.Get("Nats-Service-Error")
}

// stalledRoute is a node's report 2 held in the stalled routes of its
// flownode's server, s0, while its report 3 was acked through s1.
type stalledRoute struct {
	s       *system
	node    uint64
	rep     reportFn           // the node's reports
	third   uint64             // report 3's revision
	healthy *nats.Conn         // a client of s1
	answers *nats.Subscription // the flownode's inbox, on s0
	flownode,
	marks *nats.Conn
	seen map[int]chan struct{} // per server, closed when report 2 reached it
	mark map[int]chan struct{} // per server, closed when the marker reached it
}

// stallFlownodeServer runs the system with the servers' configuration
// conf, the stream led by s1, workers on s1 and s2, and s0 with none; it
// stalls every route of s0, sends report 2 there, and acks report 3
// through s1.
func stallFlownodeServer(t *testing.T, conf string) *stalledRoute {
	s, _ := startLedSystem(t, newHistory(), systemConfig{on: []int{1, 2}, serverConfig: conf}, 1)
	return stallFlownodeServerOf(t, s, seqReport)
}

// stallFlownodeServerOf stalls every route of s's server s0, which no
// worker is on, sends report 2 of rep there, and acks report 3 of rep
// through s1.
func stallFlownodeServerOf(t *testing.T, s *system, rep reportFn) *stalledRoute {
	const node = 1
	r := &stalledRoute{s: s, node: node, rep: rep, seen: map[int]chan struct{}{}, mark: map[int]chan struct{}{}}
	var err error
	r.flownode, err = nats.Connect(s.servers[0].URL)
	require.NoError(t, err)
	t.Cleanup(r.flownode.Close)
	r.healthy, err = nats.Connect(s.servers[1].URL, nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(r.healthy.Close)
	requireAckedWith(t, r.flownode, node, 1, 20*time.Second, rep)
	second := rep(node, 2)
	for i := range s.servers {
		// A server whose listener is still coming up after the system
		// started refuses a first connection: try again, bounded.
		var sc *nats.Conn
		wait.Until(t, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
			sc, err = nats.Connect(s.servers[i].URL)
			return err == nil, fmt.Sprintf("connect to server %d: %v", i, err)
		})
		t.Cleanup(sc.Close)
		r.seen[i], r.mark[i] = make(chan struct{}), make(chan struct{})
		_, err = sc.Subscribe(subjects.Heartbeat(node), onceWhen(r.seen[i], func(m *nats.Msg) bool { return string(m.Data) == string(second) }))
		require.NoError(t, err)
		_, err = sc.Subscribe(markerSubject, onceWhen(r.mark[i], func(*nats.Msg) bool { return true }))
		require.NoError(t, err)
		require.NoError(t, sc.Flush())
	}
	r.answers, err = r.flownode.SubscribeSync(nats.NewInbox())
	require.NoError(t, err)
	require.NoError(t, r.flownode.Flush())

	for j := 1; j < len(s.servers); j++ {
		s.cluster.Route(0, j).Stall()
	}
	require.NoError(t, r.flownode.PublishRequest(subjects.Heartbeat(node), r.answers.Subject, second))
	_, err = r.answers.NextMsg(time.Second)
	require.ErrorIs(t, err, nats.ErrTimeout, "report 2 must be held in a stalled route, so that the node sees no answer")
	r.third = requireAckedWith(t, r.healthy, node, 3, 10*time.Second, rep)
	return r
}

// markerSubject is what awaitMarker publishes, outside the workers'.
const markerSubject = "chaos.marker"

// heal lets s0's routes flow again.
func (r *stalledRoute) heal() {
	for j := 1; j < len(r.s.servers); j++ {
		r.s.cluster.Route(0, j).Heal()
	}
}

// awaitMarker publishes a marker on s0 until s1 and s2 have received it.
func (r *stalledRoute) awaitMarker(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		require.NoError(t, r.flownode.Publish(markerSubject, nil))
		select {
		case <-r.mark[1]:
			select {
			case <-r.mark[2]:
				return
			case <-time.After(100 * time.Millisecond):
			}
		case <-time.After(100 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "a marker from s0 did not reach s1 and s2 within 30 s of the heal")
	}
}

// reached returns the servers other than s0 that report 2 reached.
func (r *stalledRoute) reached() []int {
	var out []int
	for i := 1; i < len(r.s.servers); i++ {
		select {
		case <-r.seen[i]:
			out = append(out, i)
		default:
		}
	}
	return out
}

// onceWhen returns a handler that closes ch at the first message for which
// match holds.
func onceWhen(ch chan struct{}, match func(*nats.Msg) bool) nats.MsgHandler {
	closed := false
	return func(m *nats.Msg) {
		if !closed && match(m) {
			closed = true
			close(ch)
		}
	}
}

// awaitRoutePeers waits (30 s at most) until server i's routes lead to
// exactly the servers want.
func awaitRoutePeers(t *testing.T, c *proctest.Cluster, i int, want []string) {
	t.Helper()
	require.NoError(t, c.AwaitRoutePeers(i, want, 30*time.Second))
}

func strOr(s, alt string) string {
	if s == "it was" {
		return alt
	}
	return s
}

// requireAcked sends report k of node n on nc until a worker acks it,
// within timeout, and returns the revision.
func requireAcked(t *testing.T, nc *nats.Conn, n uint64, k int, timeout time.Duration) uint64 {
	t.Helper()
	return requireAckedWith(t, nc, n, k, timeout, seqReport)
}

// requireAckedWith is requireAcked with reports of rep.
func requireAckedWith(t *testing.T, nc *nats.Conn, n uint64, k int, timeout time.Duration, rep reportFn) uint64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg, err := nc.Request(subjects.Heartbeat(n), rep(n, k), 3*time.Second)
		out := result(input{kind: opReport}, msg, err)
		if out.status == stOK {
			return out.rev
		}
		require.True(t, time.Now().Before(deadline), "report %d of node %d not acked within %v: %s", k, n, timeout, out.code)
		time.Sleep(100 * time.Millisecond)
	}
}
