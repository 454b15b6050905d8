package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Bounds of the metrics server, so that idle or slow clients cannot hold it.
const (
	metricsReadHeaderTimeout = 2 * time.Second
	metricsReadTimeout       = 5 * time.Second
	metricsWriteTimeout      = 30 * time.Second // a CPU profile takes 30 s by default
	metricsIdleTimeout       = 30 * time.Second
	metricsShutdownTimeout   = time.Second
	// metricsMaxConns is the most connections the metrics server holds; a
	// new one past it closes the oldest idle one.
	metricsMaxConns = 64
)

// metricsServer serves /metrics, /healthz (the process runs and answers
// the reports it takes), /readyz (the worker serves) and, with --pprof, Go's /debug/pprof/ profiles.
type metricsServer struct {
	srv  *http.Server
	ln   net.Listener
	log  *slog.Logger
	addr string // where it listens
}

// newMetricsServer listens on addr, at once, so that a taken port fails
// start-up; Run serves, and Stop shuts it down.
func newMetricsServer(addr string, reg prometheus.Gatherer, ready, alive func() error, withPProf bool, log *slog.Logger) (*metricsServer, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	if withPProf {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		if err := alive(); err != nil {
			http.Error(rw, "not alive: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = rw.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(rw, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = rw.Write([]byte("ready\n"))
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	limit := newConnLimit(metricsMaxConns)
	return &metricsServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: metricsReadHeaderTimeout,
			ReadTimeout:       metricsReadTimeout,
			WriteTimeout:      metricsWriteTimeout,
			IdleTimeout:       metricsIdleTimeout,
			MaxHeaderBytes:    16 << 10,
			ConnState:         limit.track,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		ln:   ln,
		log:  log,
		addr: ln.Addr().String(),
	}, nil
}

// newRegistry registers the worker's collectors and Go's.
func newRegistry(stats *statsCollector, latency prometheus.Histogram) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(stats, latency, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Run serves until ctx ends, or fails with the server's error.
func (s *metricsServer) Run(ctx context.Context) error {
	s.log.Info("metrics listening", slog.String("addr", s.addr))
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		return nil
	}
}

// Stop shuts the server down by ctx's deadline, within
// metricsShutdownTimeout at most, then closes the connections left (a
// profile being taken).
func (s *metricsServer) Stop(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, metricsShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close()
	}
	return nil
}

// connLimit caps the connections of an HTTP server: past max, a new
// connection closes the oldest one that is idle or has not sent a request
// yet, so that a crowd of idle clients neither exhausts file descriptors nor
// locks out a health check.
type connLimit struct {
	max   int
	mu    sync.Mutex // guards conns
	conns map[net.Conn]connInfo
}

type connInfo struct {
	state http.ConnState
	since time.Time
}

func newConnLimit(max int) *connLimit {
	return &connLimit{max: max, conns: make(map[net.Conn]connInfo)}
}

// track is the server's ConnState hook.
func (l *connLimit) track(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	switch state {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
		l.mu.Unlock()
		return
	default:
		l.conns[c] = connInfo{state: state, since: time.Now()}
	}
	var victim net.Conn
	if state == http.StateNew && len(l.conns) > l.max {
		var oldest time.Time
		for other, info := range l.conns {
			if other == c || info.state == http.StateActive {
				continue
			}
			if victim == nil || info.since.Before(oldest) {
				victim, oldest = other, info.since
			}
		}
		if victim != nil {
			delete(l.conns, victim)
		}
	}
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
	}
}
