// Command worker keeps the live state of stream-processing flows: it applies
// the heartbeat reports of flownodes from NATS and serves the aggregate to
// frontends, as PROTOCOL.md describes. Run it with --help for its flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"flowstate/consumer"
	"flowstate/flowstate"
	"flowstate/kv"
	"flowstate/kv/jetstream"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0"

// shutdownTimeout bounds the drain on SIGINT or SIGTERM.
const shutdownTimeout = 5 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if sub, ok := subcommands[args[0]]; ok {
			return sub(args[1:], getenv, stdout, stderr)
		}
	}
	cfg, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v (see --help)\n", oneLine(err))
		return 2
	}
	level, _ := parseLevel(cfg.LogLevel)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := &Main{Config: cfg, Log: log}
	if err := m.Run(); err != nil {
		log.Error("start failed", slog.Any("err", err))
		m.Close(context.Background())
		return 1
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down", slog.Duration("timeout", shutdownTimeout))
	case <-m.closed:
		log.Error("NATS connection closed unexpectedly")
		m.Close(context.Background())
		return 1
	case err := <-m.fatal:
		log.Error("cannot consume: the NATS server refuses the heartbeat subscription; check the worker's permissions", slog.Any("err", err))
		cctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		m.Close(cctx)
		return 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := m.Close(sctx); err != nil {
		log.Error("shutdown incomplete", slog.Any("err", err))
		return 1
	}
	log.Info("bye")
	return 0
}

// Main is the running program: the embedded server if any, the connection
// and the worker.
type Main struct {
	Config Config
	Log    *slog.Logger

	srv    *server.Server
	nc     *nats.Conn
	closed <-chan struct{}
	worker *consumer.Worker
	store  kv.Store
	mgr    *flowstate.Replica // with --kv jetstream, else nil

	workerRef   atomic.Pointer[consumer.Worker] // m.worker, for the replica's OnChange
	stopReplica context.CancelFunc              // ends the replica's Run
	replicaDone chan error                      // the replica's Run returned

	stopMetrics func()
	metricsAddr string      // where metrics are served, once Run has started them
	closing     atomic.Bool // Close has begun
	connected   atomic.Bool // the connection has been up at least once
	fatal       chan error  // errors the worker cannot go on with
}

// Run starts everything and returns once the worker serves.
func (m *Main) Run() error {
	url := m.Config.NATSURL
	if url == "" {
		srv, err := startEmbedded(m.Config.Listen)
		if err != nil {
			return err
		}
		m.srv = srv
		url = srv.ClientURL()
		m.Log.Info("embedded NATS server listening", slog.String("url", url))
	}
	m.fatal = make(chan error, 1)
	nc, closed, err := connect(url, m.Config, m.Log, &m.closing, &m.connected, func(err error) {
		select {
		case m.fatal <- err:
		default:
		}
	})
	if err != nil {
		return fmt.Errorf("NATS connect: %w", err)
	}
	m.nc, m.closed = nc, closed
	mgr, err := m.openState(nc)
	if err != nil {
		return err
	}
	ccfg := m.Config.consumerConfig()
	ccfg.Version, ccfg.Logger = version, m.Log
	latency := newMergeLatency()
	if m.Config.MetricsAddr != "" {
		ccfg.OnApplied = func(d time.Duration) { latency.Observe(d.Seconds()) }
	}
	w, err := consumer.New(nc, mgr, ccfg)
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return err
	}
	m.worker = w
	m.workerRef.Store(w)
	if m.mgr != nil {
		w.Changed() // a change signalled before the worker existed
	}
	if m.Config.MetricsAddr != "" {
		stop, addr, err := serveMetrics(context.Background(), m.Config.MetricsAddr, m.newStatsCollector(w, mgr), latency, m.Log)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		m.stopMetrics, m.metricsAddr = stop, addr
	}
	epoch, _ := m.store.Epoch(context.Background())
	m.Log.Info("serving", slog.String("prefix", m.Config.Prefix), slog.String("kv", m.Config.KV), slog.String("epoch", epoch))
	return nil
}

// newStatsCollector exposes w, the connection and, with a shared store, its
// availability and the publisher lease; with --metrics-flows, the largest
// flows of mgr.
func (m *Main) newStatsCollector(w *consumer.Worker, mgr consumer.State) *statsCollector {
	js, _ := m.store.(*jetstream.Store)
	c := newStatsCollector(w, m.nc, js, m.mgr)
	c.events = watchNATS(m.nc, m.srv)
	if m.Config.MetricsFlows > 0 {
		c.flowsC = newFlowsCollector(mgr, m.Config.MetricsFlows, m.Config.PublishInterval)
	}
	return c
}

// Close shuts down in order, under ctx: drain the heartbeats and stop the
// service, drain the connection and wait until it is closed, then stop the
// embedded server.
func (m *Main) Close(ctx context.Context) error {
	var errs []error
	if m.stopMetrics != nil {
		m.stopMetrics()
	}
	if m.nc != nil && !m.connected.Load() && !m.nc.IsConnected() {
		// Never connected (the server refuses the credentials, or is not
		// there): nothing was received, and a drain would only wait for a
		// server until ctx ends. Close instead.
		m.closing.Store(true)
		m.nc.Close()
	}
	if m.worker != nil {
		if err := m.worker.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if m.stopReplica != nil {
		// Hands the publisher lease over to another worker at once.
		if err := m.closeReplica(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if js, ok := m.store.(*jetstream.Store); ok {
		js.Close()
	}
	m.closing.Store(true)
	if m.nc != nil {
		if err := m.nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			m.nc.Close()
		}
		select {
		case <-m.closed:
		case <-ctx.Done():
			m.nc.Close()
			errs = append(errs, fmt.Errorf("NATS drain: %w", ctx.Err()))
		}
	}
	if m.srv != nil {
		m.srv.Shutdown()
		m.srv.WaitForShutdown()
	}
	return errors.Join(errs...)
}

// jetStreamStartTimeout bounds the wait for JetStream at start-up.
const jetStreamStartTimeout = 15 * time.Second

// openState returns the state of the configured backend: a Manager on an
// in-memory store, or a Replica of a JetStream bucket that the workers
// share, running until Close and loaded.
func (m *Main) openState(nc *nats.Conn) (consumer.State, error) {
	if m.Config.KV != "jetstream" {
		m.store = kv.NewMemory()
		return flowstate.NewManager(m.store, flowstate.Options{DeferAggregateWrite: m.Config.PublishInterval > 0}), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), jetStreamStartTimeout)
	defer cancel()
	cfg := m.Config.jetStreamConfig()
	cfg.Logger = m.Log
	js, err := jetstream.Open(ctx, nc, cfg)
	if errors.Is(err, jetstream.ErrServerTooOld) {
		return nil, fmt.Errorf("--kv jetstream: %w", err)
	}
	if errors.Is(err, jetstream.ErrIncompatibleBucket) {
		return nil, fmt.Errorf("--kv jetstream: %w (delete the bucket, or give --kv-replicas and --kv-storage its settings)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--kv jetstream: bucket %s: %w", cfg.Bucket, err)
	}
	m.store = js
	replica, err := flowstate.NewReplica(js, flowstate.ReplicaOptions{ID: workerID(), Logger: m.Log, OnChange: func() {
		if w := m.workerRef.Load(); w != nil {
			w.Changed()
		}
	}})
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	m.mgr, m.stopReplica, m.replicaDone = replica, stop, make(chan error, 1)
	go func() { m.replicaDone <- replica.Run(runCtx) }()
	if err := replica.WaitLoaded(ctx); err != nil {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = m.closeReplica(cctx) // leave nothing running
		return nil, fmt.Errorf("--kv jetstream: bucket %s: %w", cfg.Bucket, err)
	}
	return replica, nil
}

// closeReplica ends the replica's Run (it releases the publisher lease) and
// waits for it, within ctx.
func (m *Main) closeReplica(ctx context.Context) error {
	m.stopReplica()
	select {
	case err := <-m.replicaDone:
		m.replicaDone <- err // for a second Close
		return err
	case <-ctx.Done():
		return fmt.Errorf("stop the replica: %w", ctx.Err())
	}
}

// workerID names this process in the publisher lease: host, pid and a
// random suffix.
func workerID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.Uint32()&0xffff)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// oneLine keeps an error message to one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
