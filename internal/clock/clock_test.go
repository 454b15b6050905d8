package clock

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakOptions...) }

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fired reports whether c has a value now.
func fired(c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// within waits (real time, bounded) for a value on c.
func within(t *testing.T, c <-chan time.Time) time.Time {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no tick within 10 s")
		return time.Time{}
	}
}

func TestManualTimersFireWhenTheClockPassesThem(t *testing.T) {
	m := NewManual(start)
	tm := m.NewTimer(10 * time.Second)
	m.Advance(9 * time.Second)
	assert.False(t, fired(tm.C()))
	m.Advance(time.Second)
	assert.Equal(t, start.Add(10*time.Second), within(t, tm.C()))
	assert.False(t, tm.Stop(), "a fired timer is not active")
	assert.False(t, tm.Reset(time.Second))
	assert.True(t, tm.Stop())
	m.Advance(time.Hour)
	assert.False(t, fired(tm.C()), "a stopped timer does not fire")
	assert.Equal(t, time.Hour+10*time.Second, m.Since(start))
}

func TestManualTickerDropsTicksForASlowReceiver(t *testing.T) {
	m := NewManual(start)
	tk := m.NewTicker(time.Second)
	defer tk.Stop()
	m.Advance(5 * time.Second)
	within(t, tk.C())
	assert.False(t, fired(tk.C()), "one tick held, the others dropped")
	m.Advance(time.Second)
	assert.Equal(t, start.Add(6*time.Second), within(t, tk.C()))
}

func TestControlledJumpsAndRunsAtItsRate(t *testing.T) {
	base := NewManual(start)
	c := NewControlled(base)
	defer c.Close()
	assert.Equal(t, start, c.Now())
	require.NoError(t, c.Set(Control{Offset: 30 * time.Second, Rate: 2}))
	assert.Equal(t, start.Add(30*time.Second), c.Now(), "a jump forward")
	base.Advance(10 * time.Second)
	assert.Equal(t, start.Add(50*time.Second), c.Now(), "twice as fast")
	require.NoError(t, c.Set(Control{Offset: -30 * time.Second, Rate: 0.5}))
	assert.Equal(t, start.Add(-10*time.Second), c.Now(), "a jump back of 60 s")
	base.Advance(10 * time.Second)
	assert.Equal(t, start.Add(-5*time.Second), c.Now(), "half as fast")
	assert.Equal(t, 5*time.Second, c.Since(start.Add(-10*time.Second)))
	assert.Error(t, c.Set(Control{Rate: 0}), "a stopped clock is refused")
	assert.Error(t, c.Set(Control{Offset: 2 * time.Hour, Rate: 1}))
}

func TestControlledTimersFollowItsReading(t *testing.T) {
	base := NewManual(start)
	c := NewControlled(base)
	defer c.Close()
	require.NoError(t, c.Set(Control{Rate: 2}))
	tm := c.NewTimer(10 * time.Second)
	require.True(t, base.AwaitWaiting(1, 10*time.Second), "the clock waits on its base")
	base.Advance(4 * time.Second)
	assert.False(t, fired(tm.C()))
	base.Advance(time.Second)
	within(t, tm.C()) // 10 s of this clock in 5 s of its base

	late := c.NewTimer(time.Minute)
	require.NoError(t, c.Set(Control{Offset: -30 * time.Second, Rate: 2}))
	require.NoError(t, c.Set(Control{Offset: 59 * time.Second, Rate: 2}))
	assert.False(t, fired(late.C()), "59 s of a minute")
	require.NoError(t, c.Set(Control{Offset: 60 * time.Second, Rate: 2}))
	within(t, late.C()) // the jumps have passed its deadline

	tk := c.NewTicker(10 * time.Second)
	defer tk.Stop()
	require.NoError(t, c.Set(Control{Offset: 0, Rate: 2})) // a jump back of 60 s
	require.True(t, base.AwaitWaiting(1, 10*time.Second))
	base.Advance(34 * time.Second) // 68 s of this clock
	assert.False(t, fired(tk.C()))
	base.Advance(time.Second)
	within(t, tk.C())
}

func TestControlFileRoundTripAndFollow(t *testing.T) {
	ctl := Control{Offset: -45 * time.Second, Rate: 0.5}
	got, err := ParseControl(ctl.String())
	require.NoError(t, err)
	assert.Equal(t, ctl, got)
	for _, bad := range []string{"", "offset=1s", "rate=2", "offset=1s rate=2 rate=3", "offset=x rate=1", "offset=1s rate=0", "speed=2 offset=1s rate=1"} {
		_, err := ParseControl(bad)
		assert.Error(t, err, "%q", bad)
	}

	path := filepath.Join(t.TempDir(), "clock")
	c := NewControlled(Real)
	defer c.Close()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); c.Follow(path, time.Millisecond, stop) }()
	defer func() { close(stop); <-done }()
	require.NoError(t, os.WriteFile(path, []byte("not a control line"), 0o644))
	require.NoError(t, WriteControl(path, ctl))
	require.Eventually(t, func() bool { return c.Control() == ctl }, 10*time.Second, time.Millisecond)
	assert.Error(t, WriteControl(path, Control{Rate: 1000}), "a rate past MaxRate is not written")
}
