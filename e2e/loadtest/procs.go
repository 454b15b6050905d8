package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// Bounds of the waits on processes.
const (
	startTimeout = 10 * time.Second // a process serves
	stopTimeout  = 10 * time.Second // a process exits after a signal
)

// process is a child process with the tail of its output.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed when the process has exited
}

// startProcess starts path with args, in its own process group (so that a
// Ctrl-C reaches only this program, which stops the children in order) and
// killed if this program dies. FLOWSTATE_* variables are not passed on.
func startProcess(name, path string, args ...string) (*process, error) {
	p := &process{name: name, cmd: exec.Command(path, args...), out: &tailBuffer{max: 64 << 10}, done: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOWSTATE_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig, waits up to stopTimeout, then kills and waits as long
// again. It returns an error if the process had to be killed.
func (p *process) stop(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	t.Reset(stopTimeout)
	select {
	case <-p.done:
	case <-t.C:
	}
	return fmt.Errorf("%s did not exit within %v of %v; killed", p.name, stopTimeout, sig)
}

// tailBuffer keeps the last max bytes written to it; it is safe for
// concurrent use.
type tailBuffer struct {
	mu  sync.Mutex // guards buf
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startWithRetry starts a server on a free port, trying again a few times
// in case another program took the port in between.
func startWithRetry(ctx context.Context, start func(port int) (*process, error), ready func(p *process, port int) error) (*process, int, error) {
	var lastErr error
	for range 3 {
		port, err := freePort()
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
			return fmt.Errorf("%s exited before %s; output:\n%s", p.name, what, p.out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not %s within %v: %v; output:\n%s", p.name, what, startTimeout, err, p.out)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startNATS starts nats-server with args on a free port of 127.0.0.1 and
// waits until a client can connect.
func startNATS(ctx context.Context, path string, args ...string) (p *process, url string, err error) {
	p, port, err := startWithRetry(ctx,
		func(port int) (*process, error) {
			return startProcess("nats-server", path, append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)...)
		},
		func(p *process, port int) error {
			url := "nats://127.0.0.1:" + strconv.Itoa(port)
			return poll(ctx, p, "accepting clients", func() error {
				nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
				if err == nil {
					nc.Close()
				}
				return err
			})
		})
	if err != nil {
		return nil, "", err
	}
	return p, "nats://127.0.0.1:" + strconv.Itoa(port), nil
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
	for _, line := range strings.Split(w.out.String(), "\n") {
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
		return nil, fmt.Errorf("perf exited: %s", p.out)
	}
	return p, nil
}
