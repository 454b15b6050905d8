package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"flowstate/codec"
	"flowstate/flowstate"
	"flowstate/protocol"
)

// errorLevel is the level of failures that need an operator.
const errorLevel = slog.LevelError

// Worker serves the flow state over one NATS connection. Create it with New,
// then Start it; Shutdown stops it.
type Worker struct {
	nc  *nats.Conn
	mgr *flowstate.Manager
	cfg Config
	log *slog.Logger

	hbSubject    string // <prefix>.heartbeat.*
	hbPrefix     string // <prefix>.heartbeat.
	stateSubject string // <prefix>.state
	getSubject   string // <prefix>.state.get
	nodesSubject string // <prefix>.state.nodes

	sub *nats.Subscription
	svc micro.Service
	pub *coalescer

	fwdStop, fwdDone chan struct{} // forwardChanges (follow.go); nil if not running

	// Owned by the heartbeat goroutine.
	dec    codec.Decoder
	report codec.Report

	pubMu         sync.Mutex // serialises publishState; guards lastPublished
	lastPublished flowstate.Version
	v2            v2State // delta publishing (delta.go); guarded by pubMu

	cacheMu sync.Mutex // guards cache
	cache   encoding

	epochsMu sync.Mutex        // guards epochs
	epochs   map[uint64]uint64 // node_epoch of each node's last report, if it sent one

	evictStop, evictDone chan struct{} // of evictLoop, when NodeTTL is set

	stopped  atomic.Bool // Shutdown has run
	stats    counters
	throttle *throttle
}

// New returns a Worker that will serve mgr's state on nc. It does no I/O;
// the connection stays the caller's, who closes it after Shutdown.
func New(nc *nats.Conn, mgr *flowstate.Manager, cfg Config) (*Worker, error) {
	if nc == nil || mgr == nil {
		return nil, errors.New("consumer: a connection and a manager are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	cfg = cfg.withDefaults()
	w := &Worker{
		nc:           nc,
		mgr:          mgr,
		cfg:          cfg,
		log:          cfg.Logger,
		hbSubject:    cfg.Prefix + ".heartbeat.*",
		hbPrefix:     cfg.Prefix + ".heartbeat.",
		stateSubject: cfg.Prefix + ".state",
		getSubject:   cfg.Prefix + ".state.get",
		nodesSubject: cfg.Prefix + ".state.nodes",
		epochs:       make(map[uint64]uint64),
		throttle:     newThrottle(20, 1e9),
	}
	w.dec.MaxFlows = cfg.MaxFlows
	w.pub = newCoalescer(cfg.PublishInterval, w.publishState)
	return w, nil
}

// Start subscribes to heartbeats and registers the micro service with its
// get endpoint. If it fails, nothing is left subscribed.
func (w *Worker) Start() error {
	sub, err := w.nc.QueueSubscribe(w.hbSubject, w.cfg.Queue, w.handleHeartbeat)
	if err != nil {
		return fmt.Errorf("consumer: subscribe %s: %w", w.hbSubject, err)
	}
	if err := sub.SetPendingLimits(w.cfg.PendingMsgs, w.cfg.PendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("consumer: set pending limits: %w", err)
	}
	svc, err := micro.AddService(w.nc, micro.Config{
		Name:        protocol.ServiceName,
		Version:     w.cfg.Version,
		Description: "Live state of stream-processing flows, aggregated from flownode heartbeats",
		QueueGroup:  w.cfg.Queue,
		Metadata:    map[string]string{"prefix": w.cfg.Prefix, "heartbeat_subject": w.hbSubject, "state_subject": w.stateSubject},
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			w.log.Error("service error", slog.String("subject", err.Subject), slog.String("err", err.Description))
		},
	})
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("consumer: add micro service: %w", err)
	}
	if err := svc.AddEndpoint("get", micro.HandlerFunc(w.handleGet),
		micro.WithEndpointSubject(w.getSubject),
		micro.WithEndpointMetadata(map[string]string{"description": "current aggregate; Accept: application/json for serde_json bytes"}),
	); err != nil {
		_ = svc.Stop()
		_ = sub.Unsubscribe()
		return fmt.Errorf("consumer: add get endpoint: %w", err)
	}
	if err := svc.AddEndpoint("nodes", micro.HandlerFunc(w.handleNodes),
		micro.WithEndpointSubject(w.nodesSubject),
		micro.WithEndpointMetadata(map[string]string{"description": "per-node view: node_id, node_epoch, last_report (unix ms), flows"}),
	); err != nil {
		_ = svc.Stop()
		_ = sub.Unsubscribe()
		return fmt.Errorf("consumer: add nodes endpoint: %w", err)
	}
	w.sub, w.svc = sub, svc
	go w.pub.run()
	w.forwardChanges()
	if w.cfg.NodeTTL > 0 {
		w.evictStop, w.evictDone = make(chan struct{}), make(chan struct{})
		go w.evictLoop(w.cfg.NodeTTL, w.evictStop, w.evictDone)
	}
	if w.nc.IsConnected() {
		// Make sure the server has the subscriptions before Start returns,
		// so that a report sent next finds the worker.
		if err := w.nc.FlushTimeout(5 * time.Second); err != nil {
			w.log.Warn("flush after subscribing failed", slog.Any("err", err))
		}
	}
	w.log.Info("worker started", slog.String("subject", w.hbSubject), slog.String("queue", w.cfg.Queue),
		slog.Duration("publish_interval", w.cfg.PublishInterval))
	return nil
}

// Shutdown drains the heartbeat subscription (every report already received
// is applied and acknowledged), publishes the last state, and stops the
// micro service. It returns when all of that is done or ctx ends.
// Calling it again does nothing.
func (w *Worker) Shutdown(ctx context.Context) error {
	if w.sub == nil || w.stopped.Swap(true) {
		return nil
	}
	closed := w.sub.StatusChanged(nats.SubscriptionClosed)
	var errs []error
	if err := w.sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		errs = append(errs, fmt.Errorf("drain heartbeats: %w", err))
	} else if w.sub.IsValid() {
		select {
		case <-closed:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("drain heartbeats: %w", ctx.Err()))
		}
	}
	if w.evictStop != nil {
		close(w.evictStop)
		<-w.evictDone
	}
	w.stopForwarding()
	w.pub.close()
	if err := w.svc.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stop service: %w", err))
	}
	w.log.Info("worker stopped", slog.Uint64("applied", w.stats.applied.Load()), slog.Uint64("rejected", w.stats.rejected.Load()))
	return errors.Join(errs...)
}

// Ready reports why the worker cannot serve, or nil: it must be started
// and not shut down, its subscription live, its connection up and its state
// loaded (a shared store's content read).
func (w *Worker) Ready() error {
	switch {
	case w.sub == nil:
		return errors.New("not started")
	case w.stopped.Load():
		return errors.New("shut down")
	case !w.sub.IsValid():
		return errors.New("heartbeat subscription closed")
	case !w.nc.IsConnected():
		return errors.New("NATS not connected")
	case !w.mgr.Loaded():
		return errors.New("state not loaded from the store yet")
	}
	return nil
}

// Stats returns what the worker has counted so far, and the size of the
// state now.
func (w *Worker) Stats() Stats {
	s := w.stats.snapshot()
	s.Nodes, s.Flows = w.mgr.Size()
	if v, err := w.mgr.Version(context.Background()); err == nil {
		s.Revision = v.Revision
	}
	if w.sub != nil {
		if n, err := w.sub.Dropped(); err == nil {
			s.Dropped = uint64(n)
		}
	}
	return s
}

// logThrottled logs at most a few lines per second; the next line that gets
// through says how many were held back.
func (w *Worker) logThrottled(level slog.Level, msg string, attrs ...any) {
	ok, suppressed := w.throttle.allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	w.log.Log(context.Background(), level, msg, attrs...)
}
