package proctest

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// ServerReady is the line nats-server logs once it accepts clients.
var ServerReady = regexp.MustCompile(`Server is ready`)

// Timeouts of the servers' waits.
const (
	// StartTimeout bounds the wait for a (re)started nats-server to be ready.
	StartTimeout = 30 * time.Second
	// StopTimeout bounds the wait for a process to exit after SIGTERM.
	StopTimeout = 10 * time.Second
)

// ServerSpec says how to run a nats-server.
type ServerSpec struct {
	Name string // in errors; "" is "nats-server"
	Path string // the nats-server binary
	// Port is the client port; 0 picks a free one (and another one, up to
	// three times, if it was taken before the server bound it).
	Port int
	Args []string // more arguments, after -a 127.0.0.1 -p <port>
	Env  []string // nil: CleanEnv()
	Keep int      // bytes of output kept (0: all)
	// SeparateStdout keeps stdout apart from stderr (Process.Stdout).
	SeparateStdout bool
	OwnGroup       bool // see Spec
}

// Server is a nats-server listening for clients on 127.0.0.1:Port.
type Server struct {
	*Process
	Port int
	URL  string // nats://127.0.0.1:<Port>
}

// StartServer runs nats-server and waits until it logs that it is ready.
func StartServer(spec ServerSpec) (*Server, error) {
	if spec.Name == "" {
		spec.Name = "nats-server"
	}
	tries := 1
	if spec.Port == 0 {
		tries = 3
	}
	var errs []error
	for range tries {
		port := spec.Port
		if port == 0 {
			var err error
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		p := New(Spec{
			Name: spec.Name, Path: spec.Path, Env: spec.Env, Ready: ServerReady, Keep: spec.Keep,
			SeparateStdout: spec.SeparateStdout, OwnGroup: spec.OwnGroup,
			Args: append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(port)}, spec.Args...),
		})
		if err := p.Start(); err != nil {
			return nil, err
		}
		if _, err := p.AwaitReady(StartTimeout); err != nil {
			p.Stop(StopTimeout)
			errs = append(errs, err)
			continue // the port was taken, most likely
		}
		return &Server{Process: p, Port: port, URL: "nats://127.0.0.1:" + strconv.Itoa(port)}, nil
	}
	return nil, fmt.Errorf("%s did not start: %w", spec.Name, errors.Join(errs...))
}

// Restart stops the server (SIGTERM, SIGKILL after StopTimeout; nothing
// if it has exited) and starts it again on the same port, a few times if
// the port is still held, waiting until it is ready.
func (s *Server) Restart() error {
	s.Stop(StopTimeout)
	var errs []error
	for range 5 {
		err := s.Start()
		if err == nil {
			if _, err = s.AwaitReady(StartTimeout); err == nil {
				return nil
			}
			s.Stop(StopTimeout)
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("%s did not restart on port %d: %w", s.Name(), s.Port, errors.Join(errs...))
}

// StopGracefully stops the server with SIGTERM, or SIGKILL after
// StopTimeout; the error says it had to be killed.
func (s *Server) StopGracefully() error {
	if _, ok := s.Stop(StopTimeout); !ok {
		return fmt.Errorf("%s did not exit within %v of SIGTERM", s.Name(), StopTimeout)
	}
	return nil
}
