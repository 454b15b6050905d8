package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv/jetstream"
	"github.com/flowstate-io/flowstate/state"
)

// shutdownTimeout bounds the shutdown after SIGINT or SIGTERM, or a failure.
const shutdownTimeout = 5 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status: 0 after --help or a
// clean stop, 2 for a bad command line, 1 for a failure.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if sub, ok := subcommands[args[0]]; ok {
			return sub(args[1:], getenv, stdout, stderr)
		}
	}
	m := &Main{}
	if err := m.ParseFlags(args, getenv, stdout, stderr); err != nil {
		return exitCode(err, "worker", stderr)
	}
	sig := catchSignals(m.Log)
	defer sig.stop()
	if err := m.Open(); err != nil {
		m.Log.Error("start failed", slog.Any("err", err))
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = m.Close(ctx)
		return 1
	}
	if err := m.Run(context.Background(), sig); err != nil {
		m.Log.Error("stopped on a failure", slog.Any("err", err))
		return 1
	}
	m.Log.Info("bye")
	return 0
}

// Main is the running program: the embedded server if any, the connection,
// the state, the worker and the metrics server, each an actor of group.
type Main struct {
	Config Config
	Log    *slog.Logger
	// Clock is the worker's clock, which its state, store, lease,
	// publisher and prefix watch read; clock.Default() if nil (Real, but
	// in a build for the robustness test).
	Clock clock.Clock

	id      string    // this worker's id: in its service info and the publisher lease
	started time.Time // when Open began: which of two workers started later
	group   group     // the running parts, stopped in the reverse order of their start
	prefix  *prefixWatch
	srv     *server.Server
	nc      *natsConn
	js      *jetstream.Store // --kv jetstream: the bucket; nil with --kv memory
	replica *state.Replica   // --kv jetstream: the state; nil with --kv memory
	state   consumer.State   // the state the worker serves, in either mode

	workerRef   atomic.Pointer[consumer.Worker] // the worker once started, for ready (another goroutine)
	metricsAddr string                          // where metrics are served, once Open has listened
	storeReady  func() error                    // why a shared store cannot take writes, or nil; nil without one
}

// ParseFlags sets the configuration from args and the environment, and the
// log on stderr. It returns errHelp after --help (the usage written to
// stdout), or a usage error.
func (m *Main) ParseFlags(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stdout)
	if err != nil {
		return err
	}
	level, _ := parseLevel(cfg.LogLevel)
	m.Config = cfg
	m.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return nil
}

// Open starts every part, each an actor of the group from its start: the
// embedded server, the connection, the state, the worker, the prefix watch
// and the metrics server. It fails at once on a taken port or unusable
// credentials; Close then stops what it started.
func (m *Main) Open() error {
	if m.Clock == nil {
		m.Clock = clock.Default()
	}
	m.id, m.started = workerID(), m.Clock.Now()
	m.warnings()
	auth, err := m.Config.Auth.options()
	if err != nil {
		return err
	}
	url := m.Config.NATSURL
	var inProcess nats.InProcessConnProvider
	if url == "" {
		srv, err := startEmbedded(m.Config.Listen, m.Log)
		if err != nil {
			return err
		}
		m.srv, inProcess = srv, srv
		m.group.add("embedded server", embeddedServer{srv})
		url = srv.ClientURL()
		m.Log.Info("embedded NATS server listening", slog.String("url", url))
	}
	nc, err := connect(url, inProcess, auth, m.Config.Prefix, m.Log)
	if err != nil {
		return fmt.Errorf("NATS connect: %w", err)
	}
	m.nc = nc
	m.group.add("nats", nc)
	if err := m.checkPrefix(); err != nil {
		return err
	}
	ccfg := m.Config.consumerConfig()
	ccfg.Version, ccfg.Logger, ccfg.Metadata, ccfg.Clock = version, m.Log, m.prefix.self.metadata(), m.Clock
	latency := newMergeLatency()
	if m.Config.MetricsAddr != "" {
		ccfg.OnApplied = func(d time.Duration) { latency.Observe(d.Seconds()) }
	}
	w, err := m.openState(ccfg, func() (*natsConn, error) {
		return connect(url, inProcess, auth, m.Config.Prefix, m.Log.With(slog.String("conn", "store")), storeConnOptions...)
	})
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return err
	}
	m.group.add("worker", workerPart{w: w, nc: m.nc, state: m.state, log: m.Log,
		serving: []any{slog.String("prefix", m.Config.Prefix), slog.String("kv", m.Config.KV)}})
	m.workerRef.Store(w)
	m.prefix.self.service = w.ServiceID()
	m.group.add("prefix watch", m.prefix)
	if m.Config.MetricsAddr != "" {
		reg := newRegistry(m.newStatsCollector(w), latency)
		ms, err := newMetricsServer(m.Config.MetricsAddr, reg, m.ready, m.alive, m.Config.PProf, m.Log)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %w; give another address, or port 0 for any free one", m.Config.MetricsAddr, err)
		}
		m.metricsAddr = ms.addr
		m.group.add("metrics", ms)
	}
	return nil
}

// warnings logs what the configuration allows but the operator should know.
func (m *Main) warnings() {
	c := &m.Config
	for _, u := range c.urlSecrets {
		m.Log.Warn("--nats-url carries credentials, visible in process listings; use --nats-user and "+envPassword+", or --nats-creds", slog.String("url", u))
	}
	if c.NATSURL == "" && c.ListenInsecure {
		m.Log.Warn("the embedded NATS server listens beyond loopback and has no authentication: any client that reaches it can take reports and forge acks", slog.String("listen", c.Listen))
	}
}

// Run supervises the parts that Open started, and the signals, until a
// signal (nil) or the first failure (its error), then stops them all
// (Close) by shutdownTimeout from then.
func (m *Main) Run(ctx context.Context, sig signals) error {
	m.group.add("signals", sig)
	m.group.wait(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return m.Close(sctx)
}

// newStatsCollector exposes w, the connection and, with a shared store, its
// availability and the publisher lease, the state's error bytes against
// --max-error-bytes; with --metrics-flows, the watched flows of the state.
func (m *Main) newStatsCollector(w *consumer.Worker) *statsCollector {
	c := newStatsCollector(w, m.nc.Conn, m.js, m.replica)
	c.events = watchNATS(m.nc.Conn, m.srv)
	c.readiness, c.prefix = m.ready, m.prefix
	c.maxErrorBytes, c.maxErrors = m.Config.MaxErrorBytes, m.Config.MaxErrors
	if m.Config.MetricsFlows > 0 {
		c.flowsC = newFlowsCollector(m.state, m.Config.MetricsFlows, m.Config.PublishInterval)
	}
	return c
}

// workerID names this process in the publisher lease: host, pid and a
// random suffix.
func workerID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.Uint32()&0xffff)
}
