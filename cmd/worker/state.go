package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"flowstate/flowstate"
	"flowstate/kv"
	"flowstate/kv/jetstream"
)

// jetStreamStartTimeout bounds the wait for JetStream at start-up.
const jetStreamStartTimeout = 15 * time.Second

// openState returns the manager of the configured backend: an in-memory
// store, or a JetStream bucket that the manager follows with the other
// workers.
// TODO(merge): pass m.Config.limits() once the state takes its Limits.
func (m *Main) openState() (*flowstate.Manager, error) {
	if m.Config.KV != "jetstream" {
		m.store = kv.NewMemory()
		return flowstate.NewManager(m.store, flowstate.Options{DeferAggregateWrite: m.Config.PublishInterval > 0}), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), jetStreamStartTimeout)
	defer cancel()
	cfg := m.Config.jetStreamConfig()
	cfg.Logger = m.Log
	js, err := jetstream.Open(ctx, m.nc.Conn, cfg)
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
	mgr := flowstate.NewManager(js, flowstate.Options{DeferAggregateWrite: true})
	if err := mgr.Follow(ctx, flowstate.FollowOptions{ID: workerID(), Logger: m.Log}); err != nil {
		return nil, fmt.Errorf("--kv jetstream: bucket %s: %w", cfg.Bucket, err)
	}
	m.mgr = mgr
	return mgr, nil
}
