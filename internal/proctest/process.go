package proctest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Errors of the waits on a process.
var (
	// ErrExited: the process exited before what was awaited happened.
	ErrExited = errors.New("proctest: the process exited")
	// ErrTimeout: what was awaited did not happen within its bound.
	ErrTimeout = errors.New("proctest: timed out")
)

// killTimeout bounds the wait for a process to exit after SIGKILL (one in
// uninterruptible sleep, on a disk that does not answer, may take long).
const killTimeout = 30 * time.Second

// Spec says how to run a program.
type Spec struct {
	Name string // in errors and logs
	Path string
	Args []string
	Env  []string // the whole environment; nil: CleanEnv()
	// Ready matches the output that says a run serves (AwaitReady).
	Ready *regexp.Regexp
	// Keep is how many bytes of output are kept (0: all).
	Keep int
	// SeparateStdout keeps stdout in an Output of its own (Stdout);
	// otherwise stdout and stderr go to one Output.
	SeparateStdout bool
	// OwnGroup runs the process in a process group of its own, so that a
	// Ctrl-C reaches only the program that started it, and has it killed
	// when that program dies.
	OwnGroup bool
}

// Process is a program that may be started, stopped, paused and started
// again. Its output is kept across runs. Methods act on the latest run.
type Process struct {
	spec   Spec
	out    *Output // stderr, and stdout unless spec.SeparateStdout
	stdout *Output

	mu  sync.Mutex // guards run
	run *run
}

// run is one start of a Process.
type run struct {
	cmd    *exec.Cmd
	from   int64         // the output's position when it started
	done   chan struct{} // closed when it has exited
	code   int           // exit code, valid after done; -1 if killed by a signal
	exitAt time.Time     // when the exit was seen, valid after done
}

// New returns the process of spec, not started.
func New(spec Spec) *Process {
	p := &Process{spec: spec, out: NewOutput(spec.Keep)}
	p.stdout = p.out
	if spec.SeparateStdout {
		p.stdout = NewOutput(spec.Keep)
	}
	return p
}

// Start runs spec and returns its Process.
func Start(spec Spec) (*Process, error) {
	p := New(spec)
	return p, p.Start()
}

// Name is the spec's name.
func (p *Process) Name() string { return p.spec.Name }

// Start starts a run. It is an error if a run has not exited yet.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run != nil && !closed(p.run.done) {
		return fmt.Errorf("start %s: it is running (pid %d)", p.spec.Name, p.run.cmd.Process.Pid)
	}
	cmd := exec.Command(p.spec.Path, p.spec.Args...)
	cmd.Env = p.spec.Env
	if cmd.Env == nil {
		cmd.Env = CleanEnv()
	}
	cmd.Stdout, cmd.Stderr = p.stdout, p.out
	// A child that outlives the process keeps its output pipe open: the
	// run still counts as exited once the process has.
	cmd.WaitDelay = time.Second
	if p.spec.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	r := &run{cmd: cmd, from: p.out.Len(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.spec.Name, err)
	}
	p.run = r
	go func() {
		_ = cmd.Wait()
		r.code = cmd.ProcessState.ExitCode()
		r.exitAt = time.Now()
		close(r.done)
	}()
	return nil
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (p *Process) latest() *run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.run
}

// Cmd is the latest run's command (nil before the first Start).
func (p *Process) Cmd() *exec.Cmd {
	if r := p.latest(); r != nil {
		return r.cmd
	}
	return nil
}

// Pid is the latest run's process id (0 before the first Start).
func (p *Process) Pid() int {
	if r := p.latest(); r != nil {
		return r.cmd.Process.Pid
	}
	return 0
}

// Done is closed when the latest run has exited (nil before the first
// Start).
func (p *Process) Done() <-chan struct{} {
	if r := p.latest(); r != nil {
		return r.done
	}
	return nil
}

// Exited reports whether the latest run has exited (true before the
// first Start).
func (p *Process) Exited() bool {
	r := p.latest()
	return r == nil || closed(r.done)
}

// ExitCode is the latest run's exit code, -1 if a signal ended it; valid
// once Done is closed.
func (p *Process) ExitCode() int { return p.latest().code }

// ExitedAt is when the latest run's exit was seen; valid once Done is
// closed.
func (p *Process) ExitedAt() time.Time { return p.latest().exitAt }

// Output is the process's output (stderr, and stdout unless the spec
// keeps it apart).
func (p *Process) Output() *Output { return p.out }

// Stdout is the process's stdout (the same as Output unless the spec
// keeps it apart).
func (p *Process) Stdout() *Output { return p.stdout }

// Tail returns the last n lines of output.
func (p *Process) Tail(n int) string { return p.out.Tail(n) }

// Wait waits up to timeout for the latest run to exit and returns its exit
// code; ok is false on timeout.
func (p *Process) Wait(timeout time.Duration) (code int, ok bool) {
	r := p.latest()
	if r == nil {
		return 0, true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.done:
		return r.code, true
	case <-t.C:
		return 0, false
	}
}

// Signal sends sig to the latest run unless it has exited.
func (p *Process) Signal(sig syscall.Signal) {
	if r := p.latest(); r != nil && !closed(r.done) {
		_ = r.cmd.Process.Signal(sig)
	}
}

// Pause stops the process with SIGSTOP; Resume continues it (SIGCONT).
func (p *Process) Pause() { p.Signal(syscall.SIGSTOP) }

// Resume continues a paused process.
func (p *Process) Resume() { p.Signal(syscall.SIGCONT) }

// Kill sends SIGKILL and waits (bounded) for the exit.
func (p *Process) Kill() error {
	p.Signal(syscall.SIGKILL)
	if _, ok := p.Wait(killTimeout); !ok {
		return fmt.Errorf("%s did not exit within %v of SIGKILL", p.spec.Name, killTimeout)
	}
	return nil
}

// Stop ends the latest run: SIGCONT (it may be paused) and SIGTERM, then
// SIGKILL if it has not exited within timeout. It returns the exit code,
// and ok false if it had to be killed.
func (p *Process) Stop(timeout time.Duration) (code int, ok bool) {
	return p.StopWith(syscall.SIGTERM, timeout)
}

// StopWith is Stop with another signal than SIGTERM.
func (p *Process) StopWith(sig syscall.Signal, timeout time.Duration) (code int, ok bool) {
	p.Signal(syscall.SIGCONT)
	p.Signal(sig)
	if code, ok := p.Wait(timeout); ok {
		return code, true
	}
	_ = p.Kill()
	if r := p.latest(); r != nil && closed(r.done) {
		code = r.code
	}
	return code, false
}

// AwaitOutput waits until the latest run's output matches re and returns
// the submatches; it fails if the run exits first or after timeout, with
// the output in the error.
func (p *Process) AwaitOutput(re *regexp.Regexp, timeout time.Duration) ([]string, error) {
	r := p.latest()
	if r == nil {
		return nil, fmt.Errorf("%s was not started", p.spec.Name)
	}
	m, err := p.out.Await(r.from, re, r.done, timeout)
	if errors.Is(err, ErrExited) {
		return nil, fmt.Errorf("%s exited with code %d: %w; output:\n%s", p.spec.Name, r.code, err, p.out.Since(r.from))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w; output:\n%s", p.spec.Name, err, p.out.Since(r.from))
	}
	return m, nil
}

// AwaitReady waits until the latest run's output matches the spec's Ready.
func (p *Process) AwaitReady(timeout time.Duration) ([]string, error) {
	if p.spec.Ready == nil {
		return nil, fmt.Errorf("%s: no readiness line in its spec", p.spec.Name)
	}
	return p.AwaitOutput(p.spec.Ready, timeout)
}

// Restart kills the latest run, starts a new one and waits until it is
// ready.
func (p *Process) Restart(timeout time.Duration) ([]string, error) {
	if err := p.Kill(); err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p.AwaitReady(timeout)
}

// CleanEnv is this process's environment without the worker's variables
// (FLOWSTATE_*), so that a developer's settings cannot change what a test
// runs.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOWSTATE_") {
			env = append(env, kv)
		}
	}
	return env
}

// FreePort returns a port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
