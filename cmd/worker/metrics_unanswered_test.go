package main

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/state"
)

// heldMerge is a Manager whose Merge waits until release is closed.
type heldMerge struct {
	*state.Manager
	entered, release chan struct{}
}

func (s *heldMerge) Merge(ctx context.Context, rep state.Report) (state.MergeResult, error) {
	close(s.entered)
	<-s.release
	return s.Manager.Merge(ctx, rep)
}

// gaugeOf returns the value of the gauge name that c collects now.
func gaugeOf(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	r := prometheus.NewRegistry()
	require.NoError(t, r.Register(c))
	families, err := r.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1, name)
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// The age of the oldest unanswered report is read at scrape time, on the
// worker's clock; the worker's readiness (flowstate_ready) follows it past
// 7 s, and /healthz past the liveness limit, so that a supervisor restarts
// a worker that will not answer again.
func TestMetricsShowTheOldestUnansweredReport(t *testing.T) {
	srv := natstest.Start(t, &server.Options{})
	wc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer wc.Close()
	clk := clock.NewManual(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	local := &heldMerge{Manager: state.NewManager(state.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
	w, err := consumer.New(wc, local, consumer.Config{Clock: clk})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, w.Shutdown(ctx))
	}()
	c := newStatsCollector(w, wc, nil, nil)
	assert.Zero(t, gaugeOf(t, c, "flowstate_oldest_unanswered_report_seconds"))
	assert.Zero(t, gaugeOf(t, c, "flowstate_unanswered_reports"))

	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	acks := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe("acks", acks)
	require.NoError(t, err)
	defer sub.Unsubscribe()
	body := codec.AppendReport(nil, &codec.Report{NodeID: 7, Flows: []flowstate.Flow{{ID: 1, Has: flowstate.HasStateSize, StateSize: 9}}})
	require.NoError(t, nc.PublishRequest("flow.heartbeat.7", "acks", body))
	select {
	case <-local.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the report was not merged")
	}
	assert.Equal(t, 1.0, gaugeOf(t, c, "flowstate_unanswered_reports"))
	assert.Equal(t, 1.0, gaugeOf(t, c, "flowstate_ready"))

	clk.Advance(consumer.DefaultUnansweredLimit + 500*time.Millisecond)
	assert.Equal(t, 7.5, gaugeOf(t, c, "flowstate_oldest_unanswered_report_seconds"))
	assert.Zero(t, gaugeOf(t, c, "flowstate_ready"), "past the limit")
	m := &Main{}
	m.workerRef.Store(w)
	ms, err := newMetricsServer("127.0.0.1:0", prometheus.NewRegistry(), func() error { return nil }, m.alive, false, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ms.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, ms.Stop(context.Background()))
		<-served
	}()
	code, _ := scrape(t, ms.addr, "/healthz")
	assert.Equal(t, http.StatusOK, code, "alive while its report waits less than the liveness limit")
	clk.Advance(livenessLimit - consumer.DefaultUnansweredLimit)
	code, said := scrape(t, ms.addr, "/healthz")
	assert.Equal(t, http.StatusServiceUnavailable, code, "a report held past the liveness limit")
	assert.Equal(t, "not alive: reports are not answered: the oldest of 1 waiting has waited 1m0.5s, past the 1m0s liveness limit; restart the worker\n", said)

	close(local.release)
	select {
	case m := <-acks:
		require.Empty(t, m.Header.Get("Nats-Service-Error"))
	case <-time.After(10 * time.Second):
		t.Fatal("the report was not answered")
	}
	assert.Zero(t, gaugeOf(t, c, "flowstate_oldest_unanswered_report_seconds"))
	assert.Zero(t, gaugeOf(t, c, "flowstate_unanswered_reports"))
	assert.Equal(t, 1.0, gaugeOf(t, c, "flowstate_ready"))
	code, _ = scrape(t, ms.addr, "/healthz")
	assert.Equal(t, http.StatusOK, code, "alive again once answered")
}
