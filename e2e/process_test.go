package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/proctest"
)

// Bounds of every wait.
const (
	startTimeout   = 10 * time.Second // a process is up
	stopTimeout    = 10 * time.Second // a process exits after SIGTERM
	requestTimeout = 5 * time.Second  // a request is answered
	messageTimeout = 5 * time.Second  // an expected message arrives
)

// logBuffer is a process's captured output (proctest.Output): safe for
// concurrent use, and it wakes waiters on every write.
type logBuffer struct{ *proctest.Output }

// String returns everything written so far; on a nil buffer (a process
// whose output a test reads itself) it says so.
func (b *logBuffer) String() string {
	if b == nil {
		return "(not captured: the test reads this output itself)"
	}
	return b.Output.String()
}

// snapshot returns the content and a channel closed on the next write.
func (b *logBuffer) snapshot() (string, <-chan struct{}) { return b.Snapshot() }

// process is one run of a child process (a proctest.Process) with its
// output captured, stdout apart from stderr.
type process struct {
	name   string
	cmd    *exec.Cmd
	stdout *logBuffer
	stderr *logBuffer
	done   chan struct{}     // closed when the process has exited
	code   int               // exit code, valid after done; -1 if killed by a signal
	exitAt time.Time         // when the exit was seen, valid after done
	run    *proctest.Process // nil for a process a test started itself
}

// startProcess starts path with args and env (nil: the cleaned environment).
func startProcess(t testing.TB, name, path string, env []string, args ...string) *process {
	t.Helper()
	if env == nil {
		env = cleanEnv()
	}
	pp, err := proctest.Start(proctest.Spec{Name: name, Path: path, Args: args, Env: env, SeparateStdout: true})
	require.NoError(t, err, "start %s", name)
	return wrapProcess(pp)
}

// wrapProcess follows the latest run of pp until it exits.
func wrapProcess(pp *proctest.Process) *process {
	p := &process{name: pp.Name(), cmd: pp.Cmd(), stdout: &logBuffer{pp.Stdout()}, stderr: &logBuffer{pp.Output()},
		done: make(chan struct{}), run: pp}
	exited := pp.Done()
	go func() {
		<-exited
		p.code, p.exitAt = pp.ExitCode(), pp.ExitedAt()
		close(p.done)
	}()
	return p
}

// cleanEnv is the test's environment without the worker's variables, so that
// a developer's FLOWSTATE_* settings cannot change what a test runs.
func cleanEnv() []string { return proctest.CleanEnv() }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to timeout for the process to exit and returns its exit
// code; ok is false on timeout.
func (p *process) wait(timeout time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.code, true
	case <-time.After(timeout):
		return 0, false
	}
}

// signal sends sig unless the process has exited.
func (p *process) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// terminate sends SIGTERM, waits up to timeout, then kills. It returns the
// exit code and whether the process exited by itself in time.
func (p *process) terminate(timeout time.Duration) (code int, ok bool) {
	if p.exited() {
		return p.code, true
	}
	if p.run != nil {
		_, ok = p.run.Stop(timeout)
		<-p.done
		return p.code, ok
	}
	p.signal(syscall.SIGTERM)
	if code, ok := p.wait(timeout); ok {
		return code, true
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	return p.code, false
}

// waitStderr waits until stderr matches re, and returns the submatches of
// the first match. It fails the test when the process exits first or the
// wait exceeds timeout.
func (p *process) waitStderr(t testing.TB, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	m, err := p.awaitStderr(re, timeout)
	require.NoError(t, err)
	return m
}

// awaitStderr is waitStderr returning an error instead of failing.
func (p *process) awaitStderr(re *regexp.Regexp, timeout time.Duration) ([]string, error) {
	if p.run == nil {
		return nil, fmt.Errorf("%s: its stderr is not captured", p.name)
	}
	return p.run.AwaitOutput(re, timeout)
}
