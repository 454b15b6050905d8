package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestThrottleLetsMaxPerWindowAndCountsTheRest(t *testing.T) {
	now := time.Unix(0, 0)
	th := New(2, time.Second)
	th.Now = func() time.Time { return now }

	ok, _ := th.Allow()
	assert.True(t, ok)
	ok, _ = th.Allow()
	assert.True(t, ok)
	for range 5 {
		ok, _ = th.Allow()
		assert.False(t, ok)
	}
	now = now.Add(time.Second - 1)
	ok, _ = th.Allow()
	assert.False(t, ok, "the window is not over")
	now = now.Add(1)
	ok, suppressed := th.Allow()
	assert.True(t, ok)
	assert.Equal(t, 6, suppressed)
}

func TestThrottleOfOnePerWindowLetsTheFirstEventThrough(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	th := New(1, 10*time.Second)
	th.Now = func() time.Time { return now }

	ok, suppressed := th.Allow()
	assert.True(t, ok)
	assert.Zero(t, suppressed)
	now = now.Add(9 * time.Second)
	ok, _ = th.Allow()
	assert.False(t, ok)
	now = now.Add(time.Second)
	ok, suppressed = th.Allow()
	assert.True(t, ok)
	assert.Equal(t, 1, suppressed)
}
