package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds of the waits on processes.
const (
	startTimeout = 30 * time.Second // a (re)started process serves
	stopTimeout  = 10 * time.Second // a process exits after SIGTERM
)

// proc is a program that the nemesis may kill, pause and restart. Its
// output is kept, the last logKeep bytes of it.
type proc struct {
	name  string
	path  string
	args  []string
	env   []string
	ready *regexp.Regexp // the stderr line that says it serves

	mu        sync.Mutex // guards the fields below
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has exited
	readyC    chan struct{} // closed when ready matched
	log       []string
	instances []instance
}

// instance is one run of a proc: when it was started and the epoch its
// "serving" line named (workers only).
type instance struct {
	start int64 // ns since the history's origin
	epoch string
}

const logKeep = 400 // lines of output kept per process

var epochLine = regexp.MustCompile(`msg=serving .*epoch=(\S+)`)

// start runs the program; now gives the history's clock.
func (p *proc) start(now func() int64) error {
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	out, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = cmd.Stderr
	started := now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done, ready := make(chan struct{}), make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.readyC = cmd, done, ready
	p.instances = append(p.instances, instance{start: started})
	idx := len(p.instances) - 1
	p.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		isReady := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log = append(p.log, line)
			if len(p.log) > 2*logKeep {
				p.log = append(p.log[:0], p.log[len(p.log)-logKeep:]...)
			}
			if m := epochLine.FindStringSubmatch(line); m != nil {
				p.instances[idx].epoch = m[1]
			}
			p.mu.Unlock()
			if !isReady && p.ready.MatchString(line) {
				isReady = true
				close(ready)
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	return nil
}

// awaitReady waits until the running instance serves.
func (p *proc) awaitReady() error {
	p.mu.Lock()
	ready, done := p.readyC, p.done
	p.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-done:
		return fmt.Errorf("%s exited before it served:\n%s", p.name, p.tail(20))
	case <-time.After(startTimeout):
		return fmt.Errorf("%s did not serve within %v:\n%s", p.name, startTimeout, p.tail(20))
	}
}

// signal sends sig to the running instance, if any.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(sig)
		}
	}
}

// kill stops the running instance with SIGKILL and waits for its exit.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	p.wait()
}

func (p *proc) wait() {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done != nil {
		<-done // bounded: SIGKILL cannot be ignored
	}
}

// stop ends the running instance gracefully, or kills it after stopTimeout.
// It returns an error if it had to kill it.
func (p *proc) stop() error {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-time.After(stopTimeout):
		p.kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.name, stopTimeout)
	}
}

// restart kills the running instance, starts a new one and waits until it
// serves.
func (p *proc) restart(now func() int64) error {
	p.kill()
	if err := p.start(now); err != nil {
		return err
	}
	return p.awaitReady()
}

// tail returns the last n lines of output.
func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log[max(0, len(p.log)-n):], "\n")
}

// epochs returns the epoch of each instance that named one.
func (p *proc) epochs() []instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]instance(nil), p.instances...)
}

// cleanEnv is the environment without the worker's variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOWSTATE_") {
			env = append(env, kv)
		}
	}
	return env
}

var errNoQuorum = errors.New("chaos: JetStream has no meta leader")
