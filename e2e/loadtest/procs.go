package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/internal/proctest"
)

// Bounds of the waits on processes.
const (
	startTimeout = 10 * time.Second // a process serves
	stopTimeout  = 10 * time.Second // a process exits after a signal
)

// outputKeep is how many bytes of a process's output are kept.
const outputKeep = 64 << 10

// process is a child process (a proctest.Process) with the tail of its
// output, in its own process group (so that a Ctrl-C reaches only this
// program, which stops the children in order) and killed if this program
// dies. FLOWSTATE_* variables are not passed on.
type process struct {
	*proctest.Process
}

// startProcess starts path with args.
func startProcess(name, path string, args ...string) (*process, error) {
	p, err := proctest.Start(proctest.Spec{Name: name, Path: path, Args: args, Keep: outputKeep, OwnGroup: true})
	if err != nil {
		return nil, err
	}
	return &process{p}, nil
}

func (p *process) pid() int { return p.Pid() }

func (p *process) exited() bool { return p.Exited() }

// stop sends sig, waits up to stopTimeout, then kills. It returns an error
// if the process had to be killed.
func (p *process) stop(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	if _, ok := p.StopWith(sig, stopTimeout); !ok {
		return fmt.Errorf("%s did not exit within %v of %v; killed", p.Name(), stopTimeout, sig)
	}
	return nil
}

// startWithRetry starts a process that listens on a free port, trying
// again a few times in case another program took the port in between.
func startWithRetry(ctx context.Context, start func(port int) (*process, error), ready func(p *process, port int) error) (*process, int, error) {
	var lastErr error
	for range 3 {
		port, err := proctest.FreePort()
		if err != nil {
			return nil, 0, err
		}
		p, err := start(port)
		if err != nil {
			return nil, 0, err
		}
		if lastErr = ready(p, port); lastErr == nil {
			return p, port, nil
		}
		_ = p.stop(syscall.SIGKILL)
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
	}
	return nil, 0, lastErr
}

// poll calls try every 50ms until it succeeds, p exits, ctx ends or
// startTimeout passes.
func poll(ctx context.Context, p *process, what string, try func() error) error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := try()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before %s; output:\n%s", p.Name(), what, p.Output())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not %s within %v: %v; output:\n%s", p.Name(), what, startTimeout, err, p.Output())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startNATS starts nats-server with args on a free port of 127.0.0.1 and
// waits until it is ready.
func startNATS(path string, args ...string) (p *process, url string, err error) {
	srv, err := proctest.StartServer(proctest.ServerSpec{Path: path, Args: args, Keep: outputKeep, OwnGroup: true})
	if err != nil {
		return nil, "", err
	}
	return &process{srv.Process}, srv.URL, nil
}

// workerProc is a running worker with its metrics endpoint.
type workerProc struct {
	*process
	metricsAddr string
}

// startWorker starts the worker on natsURL with args (none: the default
// settings) and its metrics on a free port, and waits until /readyz
// answers, which it does once the heartbeat subscription and the get
// endpoint are in place.
func startWorker(ctx context.Context, path, natsURL string, args ...string) (*workerProc, error) {
	client := &http.Client{Timeout: time.Second}
	p, port, err := startWithRetry(ctx,
		func(port int) (*process, error) {
			return startProcess("worker", path, append([]string{"--nats-url", natsURL, "--metrics-addr", "127.0.0.1:" + strconv.Itoa(port)}, args...)...)
		},
		func(p *process, port int) error {
			addr := "127.0.0.1:" + strconv.Itoa(port)
			return poll(ctx, p, "ready", func() error {
				resp, err := client.Get("http://" + addr + "/readyz")
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("/readyz: %s", resp.Status)
				}
				return nil
			})
		})
	if err != nil {
		return nil, err
	}
	return &workerProc{process: p, metricsAddr: "127.0.0.1:" + strconv.Itoa(port)}, nil
}

// logProblems returns the worker's warning and error log lines, at most n.
func (w *workerProc) logProblems(n int) []string {
	var out []string
	for _, line := range strings.Split(w.Output().String(), "\n") {
		if len(out) < n && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
			out = append(out, line)
		}
	}
	return out
}

// startPerf records pid with perf into file, until stopped with SIGINT.
func startPerf(pid int, file string) (*process, error) {
	p, err := startProcess("perf", "perf", "record", "-F", "999", "-g", "-p", strconv.Itoa(pid), "-o", file)
	if err != nil {
		return nil, err
	}
	time.Sleep(200 * time.Millisecond) // let it attach
	if p.exited() {
		return nil, fmt.Errorf("perf exited: %s", p.Output())
	}
	return p, nil
}
