package chaos

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/internal/proctest"
)

// numberedReports returns the reports of one flownode process that numbers
// them (protocol v3): node_epoch epoch, and a seq that grows with k and
// with each attempt, as a flownode sends a retry with a new seq.
func numberedReports(epoch uint64) reportFn {
	var mu sync.Mutex
	attempts := map[int]uint64{}
	return func(n uint64, k int) []byte {
		mu.Lock()
		defer mu.Unlock()
		rep := seqReportOf(n, k)
		rep.NodeEpoch, rep.HasNodeEpoch = epoch, true
		rep.Health.HasSeq, rep.Health.Seq = true, uint64(k)*1000+attempts[k]
		attempts[k]++
		return codec.AppendReport(nil, rep)
	}
}

// TestAHeldNumberedReportIsAnswered409AndNeverShown: a flownode that
// numbers its reports (one process: one node_epoch, seq growing) sends
// report 2 through its server s0, whose routes are stalled, so that the
// request waits in a route on its way to every worker; report 3 is then
// acked through s1, and every worker has applied it (a get through each
// worker's server shows its revision). Once the routes flow again, report
// 2 reaches a worker: it is stale against report 3, so it is answered 409
// and changes nothing. (If no worker answered it, the flownode would see a
// timeout: then too it must never show.) A get shows report 3, and after
// report 4 is acked no update on the state subject up to report 4's
// revision showed report 2. On JetStream (R3, workers on s1 and s2, the
// stream led by s1) and on a memory worker on s1.
func TestAHeldNumberedReportIsAnswered409AndNeverShown(t *testing.T) {
	t.Run("jetstream", func(t *testing.T) {
		s, _ := startLedSystem(t, newHistory(), systemConfig{on: []int{1, 2}, serverConfig: proctest.WorkerServerConfig}, 1)
		heldReportIsStale(t, s, []int{1, 2})
	})
	t.Run("memory", func(t *testing.T) {
		heldReportIsStale(t, startRoutedMemorySystem(t, newHistory().now, proctest.WorkerServerConfig), []int{1})
	})
}

// heldReportIsStale runs the scenario of
// TestAHeldNumberedReportIsAnswered409AndNeverShown on s, whose workers
// are on the servers on, s0 excluded.
func heldReportIsStale(t *testing.T, s *system, on []int) {
	r := stallFlownodeServerOf(t, s, numberedReports(1_700_000_000_000))
	for _, i := range on {
		nc, err := nats.Connect(s.servers[i].URL)
		require.NoError(t, err)
		// A server hands a request to a member of the queue group
		// connected to it: the worker on s<i> answers.
		got := requireGetAt(t, nc, r.third)
		nc.Close()
		require.Equal(t, uint16(3), got.agg[r.node-1][0], "the worker on s%d holds report 3 before the routes flow again", i)
	}
	updates, err := r.healthy.SubscribeSync(subjects.State)
	require.NoError(t, err)
	require.NoError(t, r.healthy.Flush())
	r.heal()

	late, err := r.answers.NextMsg(30 * time.Second)
	var out output
	if err == nil {
		out = result(input{kind: opReport}, late, nil)
		t.Logf("report 3 acked at revision %d; report 2, held in s0's routes (it reached %v), answered after the heal: %s",
			r.third, r.reached(), describeLate(out, late))
	} else {
		require.ErrorIs(t, err, nats.ErrTimeout)
		out = output{status: stUnknown, code: err.Error()}
		t.Logf("report 3 acked at revision %d; report 2, held in s0's routes (it reached %v), unanswered 30 s after the heal", r.third, r.reached())
	}
	switch {
	case out.status == stStale:
		// Report k's seq is k*1000 plus its attempt (numberedReports).
		assert.Regexp(t, `node_epoch 1700000000000 seq 2000\b.* holds node_epoch 1700000000000 seq 30\d\d\b`, late.Header.Get("Nats-Service-Error"),
			"the reason names report 2's seq and report 3's")
	case out.status == stUnknown:
		// Dropped on the way (the flownode timed out), or answered 503 by a
		// worker whose watch the held route's heal left behind for a
		// moment: not applied, and it must never show.
	default:
		t.Errorf("report 2, older than report 3 of the same process, which every worker held, was %s", describeLate(out, late))
	}

	got := requireGetAt(t, r.healthy, r.third)
	assert.Equal(t, uint16(3), got.agg[r.node-1][0], "a get after report 2 was answered shows report 3")
	fourth := requireAckedWith(t, r.healthy, r.node, 4, 30*time.Second, r.rep)
	// Every update up to report 4's: none shows report 2.
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := updates.NextMsg(time.Until(deadline))
		require.NoError(t, err, "no update at report 4's revision %d within 30 s", fourth)
		u := result(input{kind: opGet}, m, nil)
		require.Equal(t, stOK, u.status)
		require.False(t, u.alien, "an update holds what no client sent: %s", u.code)
		require.NotEqual(t, uint16(2), u.agg[r.node-1][0], "the update at revision %d shows the held report 2", u.rev)
		if u.rev >= fourth {
			assert.Equal(t, uint16(4), u.agg[r.node-1][0], "the update at report 4's revision shows report 4")
			return
		}
	}
}
