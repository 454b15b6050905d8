package chaos

import (
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHeldPutCannotLandAfterALaterReport: worker A is on s1, worker B on
// s2, and s0 leads the bucket's stream. Only the bytes that s1 sends to s0
// are held, so s0 keeps its quorum with s2 and no election happens. Report
// 2 of a node reaches A (B's link is cut meanwhile, so that A is the only
// member of the queue group): A's put waits in the held route, times out,
// and A answers 503. Report 3 goes through B, back, and is acked. Once the
// route flows again, A's held put reaches s0, still the leader: it must
// not be stored after report 3, which was acked after report 2 was
// answered.
func TestHeldPutCannotLandAfterALaterReport(t *testing.T) {
	const leader, node = 0, 1
	s, js := startLedSystem(t, newHistory(), systemConfig{on: []int{1, 2}}, leader)
	onS1, err := nats.Connect(s.servers[1].URL)
	require.NoError(t, err)
	defer onS1.Close()
	onS2, err := nats.Connect(s.servers[2].URL)
	require.NoError(t, err)
	defer onS2.Close()
	first := requireAcked(t, onS1, node, 1, 20*time.Second)

	a, bLink := s.workers[0], s.links[1][2]
	bLink.Cut()
	require.Equal(t, leader, streamLeader(js), "s0 still leads the stream")
	s.cluster.Route(leader, 1).Block(1)
	var second output
	// Until A answers: a request may still be routed to B's subscription
	// as it goes. A answers within its put's 2 s; one routed to B is given
	// up after requestTimeout, so that the route stays held for less than
	// the servers' ping bound (15 s), past which they close it and this is
	// another scenario (what it held is dropped, or a request it held
	// arrives late, which the contract allows).
	for range 3 {
		msg, err := onS1.Request(subjects.Heartbeat(node), seqReport(node, 2), requestTimeout)
		if second = result(input{kind: opReport}, msg, err); second.status != stUnknown || second.code != nats.ErrTimeout.Error() {
			break
		}
	}
	require.Equal(t, stUnknown, second.status, "report 2's put is held in the route: not acked (%s, revision %d)", second.code, second.rev)
	require.Equal(t, "503", second.code, "A answers 503 once its put timed out")
	bLink.Heal()
	third := requireAcked(t, onS2, node, 3, 30*time.Second) // B's, once it is back; A answers 503 at once meanwhile
	healed := a.Output().Len()
	s.cluster.Route(leader, 1).Heal()

	// A's probe writes over the same route after the held put, and s0's
	// stream takes them in that order: once A finds JetStream back, the
	// held put has been stored or refused.
	_, err = a.Output().Await(healed, regexp.MustCompile(`JetStream available again`), a.Done(), 30*time.Second)
	require.NoError(t, err)
	got := requireGetAt(t, onS2, third)
	t.Logf("report 1 acked at revision %d; report 2 answered %s while its put was held; report 3 acked at revision %d; after the heal, the get: revision %d, node %d at report %d",
		first, second.code, third, got.rev, node, got.agg[node-1][0])
	assert.Equal(t, uint16(3), got.agg[node-1][0],
		"report 2's put, held in the route while report 3 was acked, was stored after it")
}

// requireGetAt gets the state on nc until a worker answers at revision rev
// or later, within requestTimeout each and 20 s in all, and returns it.
func requireGetAt(t *testing.T, nc *nats.Conn, rev uint64) output {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		msg, err := nc.Request(subjects.Get, nil, requestTimeout)
		got := result(input{kind: opGet}, msg, err)
		if got.status == stOK && got.rev >= rev {
			return got
		}
		require.True(t, time.Now().Before(deadline), "no get at revision %d or later within 20 s: %s (revision %d)", rev, got.code, got.rev)
		time.Sleep(100 * time.Millisecond)
	}
}

// startLedSystem runs the JetStream system of cfg and hands the bucket
// stream's leadership to server leader; it returns the system and
// JetStream on a connection of the nemesis.
func startLedSystem(t *testing.T, h *history, cfg systemConfig, leader int) (*system, jetstream.JetStream) {
	t.Helper()
	cfg.diskServer = -1
	s := startJetStreamSystem(t, h.now, cfg)
	nc, err := s.connect("nemesis")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.Equal(t, "done", strOr(moveStreamLeader(nc, js, leader), "done"), "s%d leads the bucket's stream", leader)
	return s, js
}
