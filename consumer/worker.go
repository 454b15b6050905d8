package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/throttle"
	"github.com/flowstate-io/flowstate/protocol"
)

// errorLevel is the level of failures that need an operator.
const errorLevel = slog.LevelError

// Worker serves the flow state over one NATS connection. Create it with New,
// then Start it; Shutdown stops it.
type Worker struct {
	nc  *nats.Conn
	mgr State  // the state it serves, in either mode
	in  intake // how reports reach it: the mode, chosen by New or NewShared
	cfg Config
	log *slog.Logger

	hbSubject    string // <prefix>.heartbeat.*
	hbPrefix     string // <prefix>.heartbeat.
	stateSubject string // <prefix>.state
	getSubject   string // <prefix>.state.get
	nodesSubject string // <prefix>.state.nodes

	// ctx is the base context of the handlers (heartbeats, get, nodes):
	// Shutdown cancels it once intake has stopped and the reports already
	// received are applied or dropped. pubCtx bounds the publisher and the
	// eviction loop: Shutdown cancels it when it returns or its own
	// context ends.
	ctx       context.Context
	cancel    context.CancelFunc
	pubCtx    context.Context
	pubCancel context.CancelFunc

	sub *nats.Subscription
	svc micro.Service
	pub *coalescer

	// The worker's own goroutines, started by Start and stopped by
	// Shutdown: the publisher (pub.run) and, with Config.NodeTTL, the
	// eviction loop.
	publisher, evictor *loop

	// Owned by the heartbeat goroutine.
	dec    codec.Decoder
	report codec.Report

	pubMu         sync.Mutex // serialises publishState; guards lastPublished
	lastPublished flowstate.Version
	v2            v2State     // delta publishing (delta.go); guarded by pubMu
	full          fullCadence // spacing of full updates (full.go); guarded by pubMu

	cacheMu sync.Mutex // guards cache
	cache   encoding

	nodesMu    sync.Mutex // guards nodesCache
	nodesCache nodesEncoding

	epochsMu  sync.Mutex        // guards epochs and epochsGen
	epochs    map[uint64]uint64 // node_epoch of each node's last report, if it sent one
	epochsGen uint64            // bumped on every change of epochs

	// waiting holds when each report taken and not yet answered was
	// taken: readiness and the age of the oldest (unanswered.go).
	waiting unanswered

	stopped  atomic.Bool // Shutdown has run
	dropping atomic.Bool // Shutdown's apply budget is spent: reports are dropped
	stats    counters
	throttle *throttle.Throttle
}

// New returns a Worker that will serve local, a state this worker alone
// holds, on nc. It does no I/O; the connection stays the caller's, who
// closes it after Shutdown.
func New(nc *nats.Conn, local Local, cfg Config) (*Worker, error) {
	if local == nil {
		return nil, errors.New("consumer: a state is required")
	}
	w, err := newWorker(nc, local, cfg)
	if err != nil {
		return nil, err
	}
	w.in = localIntake{w: w, state: local, h: new(heartbeat)}
	return w, nil
}

// NewShared returns a Worker that will serve shared, the state of a store
// that several workers share, on nc, as New does.
func NewShared(nc *nats.Conn, shared Shared, cfg Config) (*Worker, error) {
	if shared == nil {
		return nil, errors.New("consumer: a state is required")
	}
	w, err := newWorker(nc, shared, cfg)
	if err != nil {
		return nil, err
	}
	w.in = sharedIntake{w: w, state: shared}
	w.pub.follow(shared.Changes())
	return w, nil
}

func newWorker(nc *nats.Conn, state State, cfg Config) (*Worker, error) {
	if nc == nil {
		return nil, errors.New("consumer: a connection is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	cfg = cfg.withDefaults()
	subjects := protocol.SubjectsOf(cfg.Prefix)
	w := &Worker{
		nc:           nc,
		mgr:          state,
		cfg:          cfg,
		log:          cfg.Logger,
		hbSubject:    subjects.Heartbeats,
		hbPrefix:     subjects.HeartbeatPrefix,
		stateSubject: subjects.State,
		getSubject:   subjects.Get,
		nodesSubject: subjects.Nodes,
		epochs:       make(map[uint64]uint64),
		throttle:     throttle.New(20, time.Second),
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.pubCtx, w.pubCancel = context.WithCancel(context.Background())
	w.dec.MaxFlows = cfg.MaxFlows
	w.pub = newCoalescer(cfg.PublishInterval, cfg.Clock, w.publishState)
	return w, nil
}

// Start subscribes to heartbeats and registers the micro service with its
// get and nodes endpoints. If it fails, nothing is left subscribed.
func (w *Worker) Start() error {
	sub, err := w.nc.QueueSubscribe(w.hbSubject, w.cfg.Queue, w.handleHeartbeat)
	if err != nil {
		return fmt.Errorf("consumer: subscribe %s: %w", w.hbSubject, err)
	}
	if err := sub.SetPendingLimits(w.cfg.PendingMsgs, w.cfg.PendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("consumer: set pending limits: %w", err)
	}
	svc, err := w.addService()
	if err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	w.sub, w.svc = sub, svc
	w.publisher = startLoop(w.pub.run)
	if w.cfg.NodeTTL > 0 {
		w.evictor = startLoop(w.evictLoop)
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

// addService registers the micro service and its endpoints, each with a
// bounded queue: past Config.EndpointPendingMsgs the client library drops
// requests, which the service's error handler counts.
func (w *Worker) addService() (micro.Service, error) {
	metadata := make(map[string]string, len(w.cfg.Metadata)+3)
	maps.Copy(metadata, w.cfg.Metadata)
	maps.Copy(metadata, map[string]string{"prefix": w.cfg.Prefix, "heartbeat_subject": w.hbSubject, "state_subject": w.stateSubject})
	svc, err := micro.AddService(w.nc, micro.Config{
		Name:         protocol.ServiceName,
		Version:      w.cfg.Version,
		Description:  "Live state of stream-processing flows, aggregated from flownode heartbeats",
		QueueGroup:   w.cfg.Queue,
		Metadata:     metadata,
		ErrorHandler: w.serviceError,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: add micro service: %w", err)
	}
	limits := micro.WithEndpointPendingLimits(w.cfg.EndpointPendingMsgs, w.cfg.EndpointPendingBytes)
	for _, e := range []struct {
		name, subject, description string
		handler                    micro.HandlerFunc
	}{
		{endpointGet, w.getSubject, "current aggregate; Accept: application/json for serde_json bytes", w.handleGet},
		{endpointNodes, w.nodesSubject, "per-node view: node_id, node_epoch, last_report (unix ms), flows", w.handleNodes},
	} {
		if err := svc.AddEndpoint(e.name, e.handler, micro.WithEndpointSubject(e.subject), limits,
			micro.WithEndpointMetadata(map[string]string{"description": e.description})); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("consumer: add %s endpoint: %w", e.name, err)
		}
	}
	return svc, nil
}

// serviceError counts and logs an asynchronous error of the service's
// subscriptions: a full endpoint queue (a flood of requests) is a slow
// consumer error.
func (w *Worker) serviceError(_ micro.Service, err *micro.NATSError) {
	if errors.Is(err, nats.ErrSlowConsumer) {
		w.stats.endpointOverflows.Add(1)
		w.logThrottled(slog.LevelWarn, "endpoint queue full: requests dropped", slog.String("subject", cutToken(err.Subject)),
			slog.Int("pending_limit", w.cfg.EndpointPendingMsgs))
		return
	}
	w.logThrottled(errorLevel, "service error", slog.String("subject", cutToken(err.Subject)), slog.String("err", err.Description))
}

// Ready reports why the worker cannot serve, or nil: it must be started
// and not shut down, its subscription live, its connection up, its state
// loaded (a shared store's content read), and no report may have waited
// for its answer longer than Config.UnansweredLimit.
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
	case !w.in.loaded():
		return errors.New("state not loaded from the store yet")
	}
	return w.answersStalled()
}

// ServiceID is the id of the worker's micro service, as $SRV.INFO and
// $SRV.PING give it; empty before Start.
func (w *Worker) ServiceID() string {
	if w.svc == nil {
		return ""
	}
	return w.svc.Info().ID
}

// Stats returns what the worker has counted so far, and the size of the
// state now.
func (w *Worker) Stats() Stats {
	s := w.stats.snapshot()
	s.Nodes, s.Flows = w.mgr.Size()
	s.ErrorBytes = w.mgr.ErrorBytes()
	s.Errors = w.mgr.Errors()
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
