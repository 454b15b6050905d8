package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFollowTargetComparesDeltasWithFullUpdates(t *testing.T) {
	run := func(v1cpu, v2cpu time.Duration, v1bytes, v2bytes uint64) []runResult {
		f := func(cpu time.Duration, b uint64) followerStats {
			return followerStats{followSample: followSample{cpu: cpu, inBytes: b}, elapsed: time.Second}
		}
		return []runResult{{follow: &followResult{v1: f(v1cpu, v1bytes), v2: f(v2cpu, v2bytes)}}}
	}
	runs := map[string][]runResult{
		"follow-1k":  run(20*time.Millisecond, 2*time.Millisecond, 280<<10, 28<<10),
		"follow-10k": run(100*time.Millisecond, 120*time.Millisecond, 2<<20, 25<<10),
	}
	ts := followTargets(func(name string) []runResult { return runs[name] })
	require.Len(t, ts, 2)
	assert.Equal(t, "met", ts[0].verdict, ts[0].detail)
	assert.Contains(t, ts[0].detail, "(0.10x)")
	assert.Contains(t, ts[0].detail, "28.0 KB/s vs 280.0 KB/s")
	assert.Equal(t, "missed", ts[1].verdict, "more CPU following deltas: %s", ts[1].detail)
	assert.Empty(t, followTargets(func(string) []runResult { return nil }))
}

func TestSnapshotTargetNeedsEveryFlow(t *testing.T) {
	get := getCost{elapsed: time.Second, workerCPU: 360 * time.Millisecond, chunks: 36}
	all := []runResult{{snapshot: &snapshotResult{flows: 1_000_000, first: get, next: get, cli: get, json: get, jsonExact: true}}}
	ts := snapshotTargets(func(string) []runResult { return all })
	require.Len(t, ts, 1)
	assert.Equal(t, "met", ts[0].verdict, ts[0].detail)
	assert.Contains(t, ts[0].detail, "worker CPU 10.0ms/chunk")
	short := []runResult{{snapshot: &snapshotResult{flows: 999_999, first: get, jsonExact: true}}}
	assert.Equal(t, "missed", snapshotTargets(func(string) []runResult { return short })[0].verdict)
	wrongJSON := []runResult{{snapshot: &snapshotResult{flows: 1_000_000, first: get, next: get, cli: get, json: get}}}
	assert.Equal(t, "missed", snapshotTargets(func(string) []runResult { return wrongJSON })[0].verdict, "worker get --json printed other bytes")
}

func TestAFollowChildWantsAModeAndAURL(t *testing.T) {
	assert.True(t, isFollowChild([]string{followChildArg, "v2", "nats://127.0.0.1:4222"}))
	assert.False(t, isFollowChild([]string{"--runs", "1"}))
	assert.Equal(t, 2, runFollowChild([]string{"v3", "nats://127.0.0.1:1"}, nil, nil))
}
