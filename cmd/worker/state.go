package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/kv/jetstream"
	"github.com/flowstate-io/flowstate/state"
)

// jetStreamStartTimeout bounds the wait for JetStream at start-up.
const jetStreamStartTimeout = 15 * time.Second

// openState builds the state of the configured backend and the worker that
// serves it, with ccfg: a Manager that this worker alone holds (--kv
// memory), or a Replica of a JetStream bucket that the workers share, on a
// connection of its own that dial makes (storeConnOptions).
func (m *Main) openState(ccfg consumer.Config, dial func() (*natsConn, error)) (*consumer.Worker, error) {
	if m.Config.KV != "jetstream" {
		mgr := state.NewManager(state.Options{Limits: m.Config.limits(), Now: m.Clock.Now})
		m.state = mgr
		return consumer.New(m.nc.Conn, chaosLocal(mgr), ccfg)
	}
	replica, err := m.openReplica(dial)
	if err != nil {
		return nil, err
	}
	m.state = replica
	return consumer.NewShared(m.nc.Conn, replica, ccfg)
}

// openReplica opens the bucket and runs a Replica of it, an actor of the
// group from here on, so that its watch has read the bucket before the
// worker serves.
func (m *Main) openReplica(dial func() (*natsConn, error)) (*state.Replica, error) {
	ctx, cancel := context.WithTimeout(context.Background(), jetStreamStartTimeout)
	defer cancel()
	cfg := m.Config.jetStreamConfig()
	cfg.Logger, cfg.Clock = m.Log, m.Clock
	snc, err := dial()
	if err != nil {
		return nil, fmt.Errorf("NATS connect: %w", err)
	}
	snc.closeAtStop = true
	m.group.add("store connection", snc)
	js, err := jetstream.Open(ctx, snc.Conn, cfg)
	if errors.Is(err, jetstream.ErrServerTooOld) || errors.Is(err, jetstream.ErrNotEnabled) {
		return nil, fmt.Errorf("--kv jetstream: %w", err)
	}
	if errors.Is(err, jetstream.ErrIncompatibleBucket) {
		return nil, fmt.Errorf("--kv jetstream: %w (delete the bucket, or give --kv-replicas and --kv-storage its settings)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--kv jetstream: bucket %s: %w", cfg.Bucket, err)
	}
	m.js = js
	m.storeReady = storeReadiness(snc, js.Available)
	m.group.add("store replicas", replicaWatch{js})
	m.warnAggregateSize(snc.MaxPayload())
	replica, err := state.NewReplica(js, state.ReplicaOptions{
		ID: m.id, Logger: m.Log, Limits: m.Config.limits(), Window: m.Config.KVWindow,
		MaxReportFlows: m.Config.MaxFlows, Clock: m.Clock,
	})
	if err != nil {
		js.Close()
		return nil, err
	}
	m.replica = replica
	m.group.add("state", sharedState{replica: replica, store: js})
	if err := replica.WaitLoaded(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("its content was not read within %v (%w): JetStream is slow or the bucket's stream has no leader; see the lines above", jetStreamStartTimeout, err)
		}
		return nil, fmt.Errorf("--kv jetstream: bucket %s: %w", cfg.Bucket, err) // Close stops the replica
	}
	return replica, nil
}

// jsonBytesPerFlow is about what one flow with its three fields takes in
// the aggregate's JSON (flowstate.AppendJSON): its id three times, a state
// size and two unix-millisecond times.
const jsonBytesPerFlow = 80

// warnAggregateSize warns when --max-total-flows lets the aggregate's JSON,
// the value of __flow/state, outgrow the server's max payload: the
// publisher then deletes the key until the aggregate fits again.
func (m *Main) warnAggregateSize(maxPayload int64) {
	fits := maxPayload / jsonBytesPerFlow
	limit := int64(m.Config.MaxTotalFlows)
	if limit > 0 && limit <= fits {
		return
	}
	m.Log.Warn("the aggregate's JSON can outgrow one NATS message: past about this many flows __flow/state is deleted until it fits again; "+
		"raise max_payload in the nats-server configuration (up to 64 MB), or lower --max-total-flows",
		slog.Int64("flows", fits), slog.Int64("max_payload", maxPayload), slog.Int64("max_total_flows", limit))
}

// sharedState is the Replica of a JetStream bucket as an actor: Run
// follows the store, and hands the publisher lease over to another worker
// before it returns; Stop then closes the store.
type sharedState struct {
	replica *state.Replica
	store   *jetstream.Store
}

// Run follows the store until ctx ends, and fails if the replica stops
// following it before.
func (s sharedState) Run(ctx context.Context) error {
	err := s.replica.Run(ctx)
	if ctx.Err() != nil {
		return err
	}
	if err == nil {
		err = errors.New("it stopped")
	}
	return fmt.Errorf("the shared state no longer follows the store: %w", err)
}

// Stop closes the store.
func (s sharedState) Stop(context.Context) error {
	s.store.Close()
	return nil
}

// replicaWatch is the store's look at the bucket's replicas as an actor:
// it reports a server that needs a restart (jetstream.Store.WatchReplicas).
type replicaWatch struct{ store *jetstream.Store }

func (w replicaWatch) Run(ctx context.Context) error {
	w.store.WatchReplicas(ctx)
	return nil
}

// Stop does nothing: the watch ends with Run.
func (replicaWatch) Stop(context.Context) error { return nil }

// The JetStream store is what a replica follows.
var _ state.Store = (*jetstream.Store)(nil)
