package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Bounds of every wait.
const (
	startTimeout   = 10 * time.Second // a process is up
	stopTimeout    = 10 * time.Second // a process exits after SIGTERM
	requestTimeout = 5 * time.Second  // a request is answered
	messageTimeout = 5 * time.Second  // an expected message arrives
)

// logBuffer collects a process's output. It is safe for concurrent use, and
// it wakes waiters on every write.
type logBuffer struct {
	mu      sync.Mutex // guards buf and changed
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newLogBuffer() *logBuffer {
	return &logBuffer{changed: make(chan struct{})}
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return n, err
}

// String returns everything written so far; on a nil buffer (a process
// whose output a test reads itself) it says so.
func (b *logBuffer) String() string {
	if b == nil {
		return "(not captured: the test reads this output itself)"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// snapshot returns the content and a channel closed on the next write.
func (b *logBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String(), b.changed
}

// process is a child process with its output captured.
type process struct {
	name   string
	cmd    *exec.Cmd
	stdout *logBuffer
	stderr *logBuffer
	done   chan struct{} // closed when the process has exited
	code   int           // exit code, valid after done; -1 if killed by a signal
	exitAt time.Time     // when the exit was seen, valid after done
}

// startProcess starts path with args and env (nil: the cleaned environment).
func startProcess(t testing.TB, name, path string, env []string, args ...string) *process {
	t.Helper()
	if env == nil {
		env = cleanEnv()
	}
	p := &process{
		name:   name,
		cmd:    exec.Command(path, args...),
		stdout: newLogBuffer(),
		stderr: newLogBuffer(),
		done:   make(chan struct{}),
	}
	p.cmd.Env = env
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start(), "start %s", name)
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		p.exitAt = time.Now()
		close(p.done)
	}()
	return p
}

// cleanEnv is the test's environment without the worker's variables, so that
// a developer's FLOWSTATE_* settings cannot change what a test runs.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOWSTATE_") {
			env = append(env, kv)
		}
	}
	return env
}

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
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s, changed := p.stderr.snapshot()
		if m := re.FindStringSubmatch(s); m != nil {
			return m, nil
		}
		select {
		case <-changed:
		case <-p.done:
			s := p.stderr.String()
			if m := re.FindStringSubmatch(s); m != nil {
				return m, nil
			}
			return nil, fmt.Errorf("%s exited with code %d before stderr matched %q; stderr:\n%s", p.name, p.code, re, s)
		case <-deadline.C:
			return nil, fmt.Errorf("%s: stderr did not match %q within %v; stderr:\n%s", p.name, re, timeout, s)
		}
	}
}
