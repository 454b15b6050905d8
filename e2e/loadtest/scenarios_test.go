package main

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/latency"
	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/protocol"
)

func TestPendingScenariosRunOnlyWhenNamed(t *testing.T) {
	all, err := parseScenarios("all")
	require.NoError(t, err)
	var kinds []kind
	for _, sc := range all {
		assert.NotEqual(t, kindSnapshot, sc.kind, sc.name)
		assert.NotEqual(t, kindFanout, sc.kind, sc.name)
		kinds = append(kinds, sc.kind)
	}
	assert.Contains(t, kinds, kindAcked, "make bench compares the JetStream backend with the memory one")
	assert.Contains(t, kinds, kindDelta, "make bench measures deltas")
	assert.Contains(t, kinds, kindFollow, "make bench measures a frontend following deltas")
	named, err := parseScenarios("acked,js-r1,js-r3," + pendingScenarioNames + ",get,50x2")
	require.NoError(t, err)
	var names []string
	for _, sc := range named {
		names = append(names, sc.name)
	}
	assert.Equal(t, []string{"acked", "js-r1", "js-r3", "snapshot", "fanout", "fanout-5s", "js-r3-sync", "get", "50x2"}, names)
	assert.Equal(t, []string{"--full-interval", "5s"}, named[5].workerArgs)
	assert.Equal(t, 3, named[2].backend.servers)
	assert.Contains(t, named[6].backend.config, "sync_interval: always", "js-r3 with a flush per write")
	for _, sc := range all {
		assert.NotEqual(t, "js-r3-sync", sc.name, "js-r3-sync runs only when named")
		if sc.name == "1000x10-v3" {
			assert.True(t, sc.health, "1000x10-v3 sends v3 health")
		}
	}
	withAll, err := parseScenarios("all,snapshot")
	require.NoError(t, err)
	assert.Equal(t, append(append([]scenario{}, all...), snapshotScenario), withAll)
	_, err = parseScenarios("js-r5")
	assert.Error(t, err)
}

func update(subject string, headers map[string]string, size int) *nats.Msg {
	m := nats.NewMsg(subject)
	for k, v := range headers {
		m.Header.Set(k, v)
	}
	m.Data = make([]byte, size)
	return m
}

func TestUpdatesCountOnlyChangesAfterTheWarmUp(t *testing.T) {
	u := &updateCounter{from: 10}
	u.onFull(update("flow.state", map[string]string{protocol.HeaderRevision: "10"}, 1000))
	u.onFull(update("flow.state", map[string]string{protocol.HeaderRevision: "12"}, 1000))
	u.onFull(update("flow.state", map[string]string{protocol.HeaderRevision: "15"}, 3000))
	u.onDelta(update("flow.state.delta", map[string]string{protocol.HeaderRevision: "12", protocol.HeaderBaseRevision: "8"}, 500))
	u.onDelta(update("flow.state.delta", map[string]string{protocol.HeaderRevision: "15", protocol.HeaderBaseRevision: "12"}, 20))
	u.onDelta(update("flow.state.delta", map[string]string{protocol.HeaderRevision: "16", protocol.HeaderBaseRevision: "15", protocol.HeaderResync: "1"}, 1))
	u.onDelta(update("flow.state.delta", map[string]string{protocol.HeaderRevision: "17"}, 1))
	r := deltaResult{full: u.full, delta: u.delta}
	assert.Equal(t, updateCount{msgs: 2, bytes: 4000}, r.full)
	assert.Equal(t, updateCount{msgs: 1, bytes: 20}, r.delta)
	assert.InDelta(t, 0.01, r.ratio(), 1e-9)
}

func TestDeltaTargetIsSkippedWithoutDeltasAndJudgedWithThem(t *testing.T) {
	none := func(string) []runResult { return nil }
	assert.Empty(t, deltaTargets(none))
	skipped := func(string) []runResult { return []runResult{{delta: &deltaResult{skipped: "no delta"}}} }
	require.Len(t, deltaTargets(skipped), 1)
	assert.Equal(t, "skipped", deltaTargets(skipped)[0].verdict)
	ran := func(pct uint64) func(string) []runResult {
		return func(string) []runResult {
			return []runResult{{delta: &deltaResult{full: updateCount{msgs: 1, bytes: 100}, delta: updateCount{msgs: 1, bytes: pct}}}}
		}
	}
	assert.Equal(t, "met", deltaTargets(ran(1))[0].verdict)
	assert.Equal(t, "missed", deltaTargets(ran(3))[0].verdict)
}

func TestAckedTargetsCompareJetStreamWithTheMemoryBackend(t *testing.T) {
	run := func(rate float64, p99 time.Duration) []runResult {
		res := loadgen.Result{Acked: uint64(rate), Elapsed: time.Second, Latency: latency.Summary{Count: 1, P99: p99}}
		return []runResult{{acked: &ackedResult{res: res, check: aggCheck{checked: true, exact: true}}}}
	}
	runs := map[string][]runResult{"acked": run(40000, 5*time.Millisecond), "js-r1": run(24000, 40*time.Millisecond), "js-r3": run(4000, time.Second)}
	ts := ackedTargets(func(name string) []runResult { return runs[name] })
	require.Len(t, ts, 2)
	assert.Equal(t, "met", ts[0].verdict, ts[0].detail)
	assert.Contains(t, ts[0].detail, "0.60x")
	assert.Equal(t, "missed", ts[1].verdict, ts[1].detail)
	assert.Contains(t, ts[1].detail, "exact in 1 of 1 runs")
	assert.Empty(t, ackedTargets(func(string) []runResult { return nil }))

	// With JetStream's own rate measured beside each run, the worker is
	// also held against it.
	withCeiling := func(rs []runResult, rate float64) []runResult {
		a := *rs[0].acked
		a.ceiling = &jsCeiling{completed: uint64(rate), elapsed: time.Second}
		return []runResult{{acked: &a}}
	}
	runs["js-r1"], runs["js-r3"] = withCeiling(runs["js-r1"], 25000), withCeiling(runs["js-r3"], 8000)
	ts = ackedTargets(func(name string) []runResult { return runs[name] })
	require.Len(t, ts, 4)
	assert.Equal(t, "met", ts[2].verdict, ts[2].detail)
	assert.Contains(t, ts[2].detail, "0.96x")
	assert.Equal(t, "missed", ts[3].verdict, ts[3].detail)
	assert.Contains(t, ts[3].detail, "0.50x")
}

func TestWorkerLimitsMakeRoomForTheAckClients(t *testing.T) {
	all, err := parseScenarios("100x10,10000x10,1000x100")
	require.NoError(t, err)
	assert.Empty(t, workerLimitArgs(all[0], 8), "the defaults hold 100x10")
	assert.Equal(t, []string{"--max-nodes", "10008", "--max-total-flows", "100080"}, workerLimitArgs(all[1], 8))
	assert.Equal(t, []string{"--max-total-flows", "100800"}, workerLimitArgs(all[2], 8))
	assert.Empty(t, workerLimitArgs(all[1], 0), "10000x10 alone fits the defaults")
}
