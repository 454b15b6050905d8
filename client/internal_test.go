package client

import (
	"strconv"
	"testing"

	"github.com/flowstate-io/flowstate/protocol"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func updateMsg(epoch string, rev uint64) *nats.Msg {
	m := nats.NewMsg("flow.state")
	m.Header.Set(protocol.HeaderEpoch, epoch)
	m.Header.Set(protocol.HeaderRevision, strconv.FormatUint(rev, 10))
	return m
}

func TestMailboxKeepsTheNewestUpdateAndFlagsWhatCameOutOfOrder(t *testing.T) {
	for name, tc := range map[string]struct {
		in        []*nats.Msg
		epoch     string
		rev       uint64
		mixed     bool
		below     uint64
		signalled bool
	}{
		"nothing":              {},
		"one":                  {in: []*nats.Msg{updateMsg("a", 3)}, epoch: "a", rev: 3, signalled: true},
		"higher revision wins": {in: []*nats.Msg{updateMsg("a", 3), updateMsg("a", 5)}, epoch: "a", rev: 5, signalled: true},
		// The worker numbers its updates in order: one that comes after a
		// newer one says that the newer one may be forged.
		"lower revision is noted":    {in: []*nats.Msg{updateMsg("a", 5), updateMsg("a", 3), updateMsg("a", 4)}, epoch: "a", rev: 5, below: 4, signalled: true},
		"a duplicate is not noted":   {in: []*nats.Msg{updateMsg("a", 5), updateMsg("a", 5)}, epoch: "a", rev: 5, signalled: true},
		"another epoch is mixed":     {in: []*nats.Msg{updateMsg("a", 5), updateMsg("b", 1)}, epoch: "b", rev: 1, mixed: true, signalled: true},
		"mixed stays until the take": {in: []*nats.Msg{updateMsg("a", 5), updateMsg("b", 1), updateMsg("b", 2)}, epoch: "b", rev: 2, mixed: true, signalled: true},
		"bad headers are ignored":    {in: []*nats.Msg{nats.NewMsg("flow.state"), updateMsg("a", 1), updateMsg("", 9)}, epoch: "a", rev: 1, signalled: true},
	} {
		t.Run(name, func(t *testing.T) {
			b := &mailbox{ready: make(chan struct{}, 1)}
			for _, m := range tc.in {
				b.put(m)
			}
			assert.Equal(t, tc.signalled, len(b.ready) == 1)
			u, ok := b.take()
			require.Equal(t, tc.epoch != "", ok)
			assert.Equal(t, tc.epoch, u.version.Epoch)
			assert.Equal(t, tc.rev, u.version.Revision)
			assert.Equal(t, tc.mixed, u.mixed)
			assert.Equal(t, tc.below, u.below)
			_, ok = b.take()
			assert.False(t, ok, "a take empties the mailbox")
		})
	}
}

func TestAStaleReportIsADistinctErrorKind(t *testing.T) {
	var err error = &ServiceError{Subject: "flow.heartbeat.7", Code: 409, Reason: "stale report of node 7"}
	assert.ErrorIs(t, err, ErrStale)
	assert.False(t, err.(*ServiceError).Rejected(), "not a bad report: 400 is")
	for _, code := range []int{400, 503, 507} {
		assert.NotErrorIs(t, &ServiceError{Code: code}, ErrStale, "code %d", code)
	}
}
