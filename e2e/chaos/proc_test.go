package chaos

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/internal/proctest"
)

// Bounds of the waits on processes.
const (
	startTimeout = 30 * time.Second // a (re)started process serves
	stopTimeout  = 10 * time.Second // a process exits after SIGTERM
)

// Output kept of each process: bytes kept, lines written to a failed
// run's folder.
const (
	logKeep  = 256 << 10
	logLines = 400
)

// proc is a worker that the nemesis may kill, pause and restart
// (proctest.Process), with the epoch each of its runs served.
type proc struct {
	*proctest.Process
	name string

	mu        sync.Mutex // guards instances
	instances []instance
}

// instance is one run of a proc: when it was started and the epoch its
// "serving" line named.
type instance struct {
	start int64 // ns since the history's origin
	epoch string
}

func newWorkerProc(name, path string, env []string, args ...string) *proc {
	return &proc{name: name, Process: proctest.New(proctest.Spec{Name: name, Path: path, Args: args,
		Env: append(proctest.CleanEnv(), env...), Ready: proctest.WorkerReady, Keep: logKeep})}
}

// start runs the program; now gives the history's clock.
func (p *proc) start(now func() int64) error {
	p.mu.Lock()
	p.instances = append(p.instances, instance{start: now()})
	p.mu.Unlock()
	return p.Start()
}

// awaitReady waits until the running instance serves, and notes its epoch.
func (p *proc) awaitReady() error {
	m, err := p.AwaitReady(startTimeout)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.instances[len(p.instances)-1].epoch = m[1]
	p.mu.Unlock()
	return nil
}

// stop ends the running instance gracefully, or kills it after stopTimeout.
// It returns an error if it had to kill it.
func (p *proc) stop() error {
	if _, ok := p.Stop(stopTimeout); !ok {
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.name, stopTimeout)
	}
	return nil
}

// restart kills the running instance, starts a new one and waits until it
// serves.
func (p *proc) restart(now func() int64) error {
	if err := p.Kill(); err != nil {
		return err
	}
	if err := p.start(now); err != nil {
		return err
	}
	return p.awaitReady()
}

// epochs returns the epoch of each instance that named one.
func (p *proc) epochs() []instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]instance(nil), p.instances...)
}

var errNoQuorum = errors.New("chaos: JetStream has no meta leader")
