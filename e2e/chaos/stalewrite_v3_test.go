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

// TestAHeldNumberedReportIsAnswered409AndNeverShown: as within the ping
// bound in TestStalledRoutesCannotBringBackAnOlderReport, but the flownode
// numbers its reports (one process: one node_epoch, seq growing). Report
// 2, held in the stalled routes of its flownode's server while report 3
// was acked through another server, reaches a worker once the routes flow
// again: it is stale against report 3, so it is answered 409 (or 503, by
// a worker whose watch has not applied report 3 yet) and changes nothing.
// No update on the state subject, and no get, shows it.
func TestAHeldNumberedReportIsAnswered409AndNeverShown(t *testing.T) {
	r := stallFlownodeServerWith(t, proctest.WorkerServerConfig, numberedReports(1_700_000_000_000))
	updates, err := r.healthy.SubscribeSync(subjects.State)
	require.NoError(t, err)
	require.NoError(t, r.healthy.Flush())
	r.heal()

	late, err := r.answers.NextMsg(30 * time.Second)
	require.NoError(t, err, "the held request reaches a worker once the route flows again, which answers it")
	out := result(input{kind: opReport}, late, nil)
	t.Logf("report 3 acked at revision %d; report 2, held in s0's routes, answered after the heal: %s", r.third, describeLate(out, late))
	switch {
	case out.status == stRejected:
		assert.Equal(t, "409", out.code)
		reason := late.Header.Get("Nats-Service-Error")
		assert.Contains(t, reason, "2000", "the reason names report 2's seq: %s", reason)
		assert.Contains(t, reason, "3000", "and report 3's: %s", reason)
	case out.status == stUnknown && out.code == "503":
		// The worker it reached had not applied report 3's write yet
		// (its watch behind the store): not judged, not written.
	default:
		t.Fatalf("report 2, older than report 3 of the same process, was %s", describeLate(out, late))
	}

	got := requireGetAt(t, r.healthy, r.third)
	assert.Equal(t, uint16(3), got.agg[r.node-1][0], "a get after the 409 shows report 3")
	// Every update published meanwhile: none shows report 2.
	for {
		m, err := updates.NextMsg(100 * time.Millisecond)
		if err != nil {
			require.ErrorIs(t, err, nats.ErrTimeout)
			break
		}
		u := result(input{kind: opGet}, m, nil)
		if u.status == stOK && !u.alien {
			assert.NotEqual(t, uint16(2), u.agg[r.node-1][0], "an update at revision %d shows the held report", u.rev)
		}
	}
}
