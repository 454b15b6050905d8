package proctest

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sh(script string) Spec {
	return Spec{Name: "sh", Path: "/bin/sh", Args: []string{"-c", script}, Ready: regexp.MustCompile(`ready (\d+)`)}
}

func TestProcessAwaitsItsReadinessLineAndStopsWithSIGTERM(t *testing.T) {
	p, err := Start(sh(`trap 'echo bye; exit 3' TERM; echo ready $$; while :; do sleep 0.05; done`))
	require.NoError(t, err)
	m, err := p.AwaitReady(10 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, p.Pid(), atoi(t, m[1]), "the line names the pid of the run")
	code, ok := p.Stop(10 * time.Second)
	assert.True(t, ok, "exited by itself on SIGTERM")
	assert.Equal(t, 3, code)
	assert.Contains(t, p.Output().String(), "bye")
	assert.True(t, p.Exited())
}

func TestProcessIsKilledWhenItIgnoresSIGTERM(t *testing.T) {
	p, err := Start(sh(`trap '' TERM; echo ready $$; while :; do sleep 0.05; done`))
	require.NoError(t, err)
	_, err = p.AwaitReady(10 * time.Second)
	require.NoError(t, err)
	code, ok := p.Stop(200 * time.Millisecond)
	assert.False(t, ok, "it had to be killed")
	assert.Equal(t, -1, code)
}

func TestAwaitReadyFailsWithTheOutputWhenTheProcessExits(t *testing.T) {
	p, err := Start(sh(`echo something went wrong >&2; exit 2`))
	require.NoError(t, err)
	_, err = p.AwaitReady(10 * time.Second)
	require.ErrorIs(t, err, ErrExited)
	assert.Contains(t, err.Error(), "something went wrong")
	assert.Contains(t, err.Error(), "code 2")
}

// A restarted process is awaited on its own output: the ready line of the
// run before does not count.
func TestRestartAwaitsTheNewRunsLine(t *testing.T) {
	p, err := Start(sh(`echo ready $$; exec sleep 60`))
	require.NoError(t, err)
	first, err := p.AwaitReady(10 * time.Second)
	require.NoError(t, err)
	second, err := p.Restart(10 * time.Second)
	require.NoError(t, err)
	assert.NotEqual(t, first[1], second[1])
	assert.Equal(t, p.Pid(), atoi(t, second[1]))
	assert.Len(t, p.Output().Lines(regexp.MustCompile(`^ready`)), 2, "the output is kept across runs")
	p.Stop(10 * time.Second)
}

func TestPauseHoldsTheProcessUntilResumed(t *testing.T) {
	p, err := Start(sh(`echo ready $$; exec sleep 60`))
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(time.Second) })
	_, err = p.AwaitReady(10 * time.Second)
	require.NoError(t, err)
	p.Pause()
	require.Eventually(t, func() bool { return procState(t, p.Pid()) == "T" }, 10*time.Second, 10*time.Millisecond, "stopped")
	p.Resume()
	require.Eventually(t, func() bool { return procState(t, p.Pid()) != "T" }, 10*time.Second, 10*time.Millisecond, "continued")
	p.Signal(syscall.SIGKILL)
	_, ok := p.Wait(10 * time.Second)
	assert.True(t, ok)
}

func TestOutputKeepsTheLastBytesAndCountsPositions(t *testing.T) {
	o := NewOutput(10)
	for range 5 {
		_, _ = o.Write([]byte("0123456789"))
	}
	assert.Equal(t, int64(50), o.Len())
	assert.LessOrEqual(t, len(o.String()), 20)
	assert.True(t, strings.HasSuffix(o.String(), "0123456789"))
	assert.Equal(t, "56789", o.Since(45))
	assert.Equal(t, o.String(), o.Since(0), "what was dropped is not there")
	_, err := o.Await(50, regexp.MustCompile(`x`), nil, 50*time.Millisecond)
	assert.ErrorIs(t, err, ErrTimeout)
	go func() { _, _ = o.Write([]byte("x")) }()
	m, err := o.Await(50, regexp.MustCompile(`x`), nil, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{"x"}, m)
}
