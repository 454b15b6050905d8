package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// checkPrefix builds the prefix watch of this worker and, when the
// connection is up, looks for a worker of the prefix with another state
// before this one consumes; if there is one, it returns the reason to stop.
// A worker not yet connected looks once its connection is up
// (prefixWatch.Run).
func (m *Main) checkPrefix() error {
	self := peer{worker: m.id, backend: m.Config.KV, started: m.started}
	if self.backend == "jetstream" {
		self.bucket = m.Config.KVBucket
	}
	m.prefix = newPrefixWatch(m.nc, m.Config.Prefix, self, m.Clock, m.Log)
	if !m.nc.IsConnected() {
		m.Log.Info("NATS not connected yet: the other workers of the prefix are looked for once it is")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), discoverWait)
	defer cancel()
	return m.prefix.atStart(ctx)
}

// ready reports in one line why the worker does not serve, or nil: /readyz
// answers 503 with it, and flowstate_ready is 0. It does not serve while
// its connection is down or stalled (found by the client's pings), while a
// shared store takes no writes or its connection is down, before its state
// is loaded, and once it stopped consuming.
func (m *Main) ready() error {
	if m.prefix != nil {
		if err := m.prefix.notServing(); err != nil {
			return err
		}
	}
	w := m.workerRef.Load()
	if w == nil {
		return errors.New("not started")
	}
	if !m.nc.IsConnected() {
		return errors.New("NATS not connected: the connection is down or stalled, reconnecting")
	}
	if m.storeReady != nil {
		if err := m.storeReady(); err != nil {
			return err
		}
	}
	return w.Ready()
}

// storeReadiness is the readiness of a JetStream store on its connection.
func storeReadiness(nc *natsConn, available func() bool) func() error {
	return func() error {
		if !nc.IsConnected() {
			return errors.New("the store's NATS connection is down or stalled, reconnecting")
		}
		if !available() {
			return errors.New("the store takes no writes (JetStream unavailable: no quorum, a server down or its storage full); reports are answered 503")
		}
		return nil
	}
}

// livenessLimit is how long a report the worker took may wait for its
// answer before /healthz fails, so that a supervisor (Kubernetes' liveness
// probe) restarts it: the worker answers every report within its apply
// timeout (2 s) whatever the store does, and is not ready past 7 s
// (consumer.DefaultUnansweredLimit); a report held for a minute will not
// be answered, and neither will those the queue group gives it after.
const livenessLimit = time.Minute

// alive reports why the worker should be restarted, or nil: /healthz
// answers 503 with it. Only a report held past livenessLimit is such a
// reason; what the worker recovers from by itself (NATS or the store
// down) makes it not ready, not dead.
func (m *Main) alive() error {
	w := m.workerRef.Load()
	if w == nil {
		return nil
	}
	if age, n := w.OldestUnanswered(); age > livenessLimit {
		return fmt.Errorf("reports are not answered: the oldest of %d waiting has waited %v, past the %v liveness limit; restart the worker",
			n, age.Round(time.Millisecond), livenessLimit)
	}
	return nil
}
