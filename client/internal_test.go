package client

import (
	"strconv"
	"testing"
	"time"

	"flowstate/protocol"

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

func TestMailboxKeepsTheNewestUpdateAndFlagsMixedEpochs(t *testing.T) {
	for name, tc := range map[string]struct {
		in        []*nats.Msg
		epoch     string
		rev       uint64
		mixed     bool
		signalled bool
	}{
		"nothing":                    {},
		"one":                        {in: []*nats.Msg{updateMsg("a", 3)}, epoch: "a", rev: 3, signalled: true},
		"higher revision wins":       {in: []*nats.Msg{updateMsg("a", 3), updateMsg("a", 5)}, epoch: "a", rev: 5, signalled: true},
		"lower revision is dropped":  {in: []*nats.Msg{updateMsg("a", 5), updateMsg("a", 3)}, epoch: "a", rev: 5, signalled: true},
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
			_, ok = b.take()
			assert.False(t, ok, "a take empties the mailbox")
		})
	}
}

func TestHistogramQuantilesAreWithinTheBucketWidth(t *testing.T) {
	var h histogram
	assert.Zero(t, h.quantile(0.5))
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * 100 * time.Microsecond) // 0.1ms .. 100ms
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		got := h.quantile(q)
		assert.InEpsilon(t, float64(want), float64(got), 0.003, "q%v: %v", q, got)
	}
	assert.Equal(t, 100*time.Millisecond, time.Duration(h.max.Load()))
}

func TestHistogramBucketsCoverEveryDuration(t *testing.T) {
	for _, us := range []uint64{0, 1, 1023, 1024, 1025, 1 << 20, 1<<40 + 12345, 1<<63 - 1, 1<<64 - 1} {
		i := bucketOf(us)
		require.Less(t, i, histBuckets, "us %d", us)
		if us < 1<<62 {
			mid := uint64(bucketMid(i) / time.Microsecond)
			assert.InEpsilon(t, float64(us)+1, float64(mid)+1, 0.002, "us %d: bucket %d mid %d", us, i, mid)
		}
	}
}
