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
)

// seqReport is report k of node n: flow n, state_size k, so that a get
// shows which report of the node it holds.
func seqReport(n uint64, k int) []byte {
	rep := codec.Report{NodeID: n, Flows: []flowstate.Flow{{ID: flowstate.FlowID(n), Has: flowstate.HasStateSize, StateSize: uint64(k)}}}
	return codec.AppendReport(nil, &rep)
}

// TestStalledRoutesCannotBringBackAnOlderReport: a flownode's server (here
// the stream leader, s0, with no worker of its own) has its routes
// stalled. The node's report 2 is sent there: the server routes the
// request to a worker on another server, so its bytes wait in a stalled
// route, and the flownode sees a timeout. The node's report 3 is then
// acked through another server. Once the routes heal, the held request
// reaches a worker: no get sent after report 3 was acked may show report
// 2 (the README: a get includes every report acked before it was sent).
func TestStalledRoutesCannotBringBackAnOlderReport(t *testing.T) {
	h := newHistory()
	const leader = 0
	s, _ := startLedSystem(t, h, []int{1, 2}, leader)

	flownode, err := nats.Connect(s.servers[leader].URL) // the node's connection, to s0
	require.NoError(t, err)
	defer flownode.Close()
	healthy, err := nats.Connect(s.servers[1].URL, nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer healthy.Close()
	const node = 1
	first := requireAcked(t, healthy, node, 1, 10*time.Second)

	// Who sees the request of report 2, and its late answer.
	seen := map[int]chan int64{}
	for i := range s.servers {
		sc, err := nats.Connect(s.servers[i].URL)
		require.NoError(t, err)
		defer sc.Close()
		ch := make(chan int64, 1)
		seen[i] = ch
		_, err = sc.Subscribe(subjects.Heartbeat(node), func(m *nats.Msg) {
			if string(m.Data) == string(seqReport(node, 2)) {
				select {
				case ch <- h.now():
				default:
				}
			}
		})
		require.NoError(t, err)
		require.NoError(t, sc.Flush())
	}
	answers, err := flownode.SubscribeSync(nats.NewInbox())
	require.NoError(t, err)
	require.NoError(t, flownode.Flush())

	for j := range s.servers {
		if j != leader {
			s.cluster.Route(leader, j).Stall()
		}
	}
	stalled := h.now()
	require.NoError(t, flownode.PublishRequest(subjects.Heartbeat(node), answers.Subject, seqReport(node, 2)))
	_, err = answers.NextMsg(time.Second)
	require.ErrorIs(t, err, nats.ErrTimeout, "report 2 must be held in a stalled route, so that the node sees no answer")

	third := requireAcked(t, healthy, node, 3, 60*time.Second) // a new stream leader first
	healed := h.now()
	for j := range s.servers {
		if j != leader {
			s.cluster.Route(leader, j).Heal()
		}
	}
	// The held request reaches a worker, whose answer goes back to the
	// flownode's inbox; wait for it (bounded), then get.
	late, lateErr := answers.NextMsg(30 * time.Second)
	var lateAnswer string
	if lateErr == nil {
		out := result(input{kind: opReport}, late, nil)
		lateAnswer = fmt.Sprintf("%s at revision %d", map[status]string{stOK: "acked", stRejected: "rejected " + out.code, stUnknown: "failed " + out.code}[out.status], out.rev)
	} else {
		lateAnswer = "none within 30 s: " + lateErr.Error()
	}
	var where string
	for i := range s.servers {
		select {
		case at := <-seen[i]:
			where += fmt.Sprintf(" s%d at %v", i, ms(at))
		default:
		}
	}
	msg, err := healthy.Request(subjects.Get, nil, requestTimeout)
	require.NoError(t, err)
	got := result(input{kind: opGet}, msg, nil)
	require.Equal(t, stOK, got.status, "a get after the heal: %s", got.code)
	t.Logf("report 1 acked at revision %d; routes of s%d (the stream leader) stalled at %v; report 2 sent to s%d, no answer; report 3 acked at revision %d through s1, then the routes healed at %v",
		first, leader, ms(stalled), leader, third, ms(healed))
	t.Logf("report 2 was published at s%d and reached the servers:%s; its late answer: %s", leader, where, lateAnswer)
	t.Logf("the get after the heal: revision %d, node %d at report %d", got.rev, node, got.agg[node-1][0])
	assert.Equal(t, uint16(3), got.agg[node-1][0],
		"a get sent after report 3 was acked shows report %d of node %d: report 2, held in a stalled route, was applied after report 3", got.agg[node-1][0], node)
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
	deadline := time.Now().Add(timeout)
	for {
		msg, err := nc.Request(subjects.Heartbeat(n), seqReport(n, k), 3*time.Second)
		out := result(input{kind: opReport}, msg, err)
		if out.status == stOK {
			return out.rev
		}
		require.True(t, time.Now().Before(deadline), "report %d of node %d not acked within %v: %s", k, n, timeout, out.code)
		time.Sleep(100 * time.Millisecond)
	}
}
