package e2e

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSigtermDuringReportsExitsCleanly sends SIGTERM while reports arrive
// as requests, and requires the worker to exit 0 within 5 s, every request
// to be acked or unanswered (never an error), and the last published
// aggregate to hold every acked report.
func TestSigtermDuringReportsExitsCleanly(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL)
	const reports, senders, conns = 2000, 64, 4
	clients := make([]*client, conns)
	for i := range clients {
		clients[i] = newClient(t, w)
	}
	u := clients[0].subscribeUpdates()

	type outcome struct {
		reply *nats.Msg
		err   error
	}
	outcomes := make([]outcome, reports)
	var acks atomic.Int64
	var sigOnce sync.Once
	sigterm := func() {
		sigOnce.Do(func() {
			w.p.signal(syscall.SIGTERM)
		})
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[s%conns]
			for i := range work {
				node := uint64(i + 1)
				body := codecReport(node, lastExec(map[uint32]int64{uint32(node): int64(node)}))
				msg, err := c.nc.Request(c.heartbeatSubject(node), body, requestTimeout)
				outcomes[i].reply, outcomes[i].err = msg, err
				if isAck(msg) && acks.Add(1) == reports/2 {
					sigterm()
				}
			}
		}()
	}
	for i := range reports {
		work <- i
	}
	close(work)
	wg.Wait()
	sigterm() // in case fewer than half were acked

	code, exited := w.p.wait(stopTimeout)
	require.True(t, exited, "worker did not exit within %v of SIGTERM", stopTimeout)
	assert.Equal(t, 0, code, "exit code after SIGTERM")
	stderr := w.Stderr()
	assert.NotContains(t, stderr, "panic")

	revisions := map[uint64]bool{}
	var maxRev uint64
	var acked, noResponders, timeouts int
	for i, o := range outcomes {
		switch {
		case o.err == nil && isAck(o.reply):
			acked++
			v := requireAck(t, o.reply)
			assert.False(t, revisions[v.Revision], "two acks with revision %d", v.Revision)
			revisions[v.Revision] = true
			maxRev = max(maxRev, v.Revision)
		case errors.Is(o.err, nats.ErrNoResponders):
			noResponders++
		case errors.Is(o.err, nats.ErrTimeout):
			timeouts++
		case o.err != nil:
			t.Errorf("report %d: %v", i, o.err)
		default:
			t.Errorf("report %d answered with something else than an ack: headers %v body %q", i, o.reply.Header, o.reply.Data)
		}
	}
	t.Logf("acked %d, no responders %d, timed out %d", acked, noResponders, timeouts)
	require.GreaterOrEqual(t, acked, reports/2)

	// The worker publishes its last state before it exits: the last update
	// holds every acked report.
	got := u.until(maxRev)
	last := decodeAggregate(t, got[len(got)-1].Body)
	for i, o := range outcomes {
		if o.err == nil && isAck(o.reply) {
			id := uint32(i + 1)
			assert.Equal(t, int64(id), last.LastExecTime[id], "acked report of node %d in the last update", id)
		}
	}
}

// isAck reports whether msg looks like an ack: a revision and no error.
func isAck(msg *nats.Msg) bool {
	return msg != nil && msg.Header.Get(hdrRevision) != "" && msg.Header.Get(micro.ErrorCodeHeader) == ""
}
