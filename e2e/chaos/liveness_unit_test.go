package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var workerNames = []string{"worker 0", "worker 1", "worker 2"}

const sec = int64(time.Second)

// samplesOf returns a worker's samples every 200 ms from 0 to until: it
// takes a report every sample, and the one it took at stuckAt (if not
// negative) and every later one stay unanswered; the others are answered
// within 40 ms.
func samplesOf(until, stuckAt int64) []liveSample {
	var out []liveSample
	for at := int64(0); at <= until; at += int64(sampleEvery) {
		s := liveSample{call: at, oldest: 40 * time.Millisecond, unanswered: 1}
		if stuckAt >= 0 && at >= stuckAt {
			s.oldest, s.unanswered = time.Duration(at-stuckAt), float64(1+(at-stuckAt)/int64(sampleEvery))
		}
		out = append(out, s)
	}
	return out
}

func TestLivenessFindsADeafWorkerAmongLiveOnes(t *testing.T) {
	evs := []event{{start: 7 * sec, heal: 8 * sec, end: 8 * sec, kind: "process", action: "SIGKILL nats-server s1 (the stream leader), restart after 1s"}}
	timedOut := op{client: 4, in: input{kind: opReport, node: 2, nodeEpoch: 7, seq: 31}, out: output{status: stUnknown, code: "nats: timeout"}, call: 10*sec - sec/10, ret: 14 * sec}
	acked := op{client: 5, in: input{kind: opReport, node: 3}, out: output{status: stOK}, call: 10 * sec, ret: 10*sec + sec/100}
	samples := [][]liveSample{samplesOf(30*sec, -1), samplesOf(30*sec, 10*sec), samplesOf(30*sec, -1)}
	problems := deafWorkers(workerNames, samples, evs, []op{timedOut, acked})
	require.Len(t, problems, 1, "the deaf worker, and only it")
	assert.Contains(t, problems[0], "worker 1 is deaf: a report it took at 10s was still unanswered at 17.2s (37 unanswered), with no fault touching it meanwhile")
	assert.Contains(t, problems[0], "client 4's report node 3 node_epoch 7 seq 31 {} -> unknown: nats: timeout, sent at 9.9s", "names the report that timed out")

	live := [][]liveSample{samplesOf(30*sec, -1), samplesOf(30*sec, -1), samplesOf(30*sec, -1)}
	assert.Empty(t, deafWorkers(workerNames, live, evs, nil), "every worker answers")
}

// A worker that went deaf during a fault that touches it is found once its
// oldest report still waits the bound after the heal, whether or not it
// took reports since (a full window takes none).
func TestLivenessFindsAWorkerThatWentDeafDuringAFault(t *testing.T) {
	evs := []event{{start: 9 * sec, heal: 12 * sec, end: 12 * sec, kind: "partition", action: "stall the routes of s0 (the stream leader): isolated from the other servers"}}
	samples := [][]liveSample{samplesOf(30*sec, -1), samplesOf(30*sec, 10*sec), samplesOf(30*sec, -1)}
	problems := deafWorkers(workerNames, samples, evs, nil)
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0], "worker 1 is deaf: a report it took at 10s was still unanswered at 19.2s (47 unanswered), 7.2s after the last fault touching it ended (at 12s)")

	// The same worker answering its reports 2 s after the heal is live.
	recovered := samplesOf(30*sec, 10*sec)
	for i := range recovered {
		if recovered[i].call > 14*sec {
			recovered[i].oldest, recovered[i].unanswered = 40*time.Millisecond, 1
		}
	}
	assert.Empty(t, deafWorkers(workerNames, [][]liveSample{samplesOf(30*sec, -1), recovered, samplesOf(30*sec, -1)}, evs, nil))
}

// A fault that touches the worker excuses a late answer; one that touches
// another worker does not.
func TestLivenessExcusesOnlyTheFaultsThatTouchTheWorker(t *testing.T) {
	// Worker 1 holds reports from 10 s to 20 s, answered at 20 s.
	held := samplesOf(30*sec, 10*sec)
	for i := range held {
		if held[i].call > 20*sec {
			held[i].oldest, held[i].unanswered = 40*time.Millisecond, 1
		}
	}
	samples := [][]liveSample{samplesOf(30*sec, -1), held, samplesOf(30*sec, -1)}
	paused := []event{{start: 10 * sec, heal: 20 * sec, end: 20 * sec, kind: "process", action: "SIGSTOP worker 1 for 10s, then SIGCONT"}}
	assert.Empty(t, deafWorkers(workerNames, samples, paused, nil))
	other := []event{{start: 10 * sec, heal: 20 * sec, end: 20 * sec, kind: "partition", action: "stall every link of worker 2: cut off from every server"}}
	problems := deafWorkers(workerNames, samples, other, nil)
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0], "worker 1 is deaf")
}

func TestFaultsTouchTheirWorkersOrAll(t *testing.T) {
	for action, want := range map[string][]bool{
		"SIGKILL and restart worker 2": {false, false, true},
		"stall every link of worker 0 (the lease holder): cut off from every server":                                            {true, false, false},
		"hold what the servers send to worker 1":                                                                                {false, true, false},
		"jump the clock of worker 0 by 3s (to 3s from real time) AND jump the clock of worker 2 by -1s (to -1s from real time)": {true, false, true},
		"cut every link of worker 1: cut off from every server WITH SIGKILL nats-server s2, restart after 2s":                   {true, true, true},
		"SIGKILL nats-server s1, restart after 1.2s":                                                                            {true, true, true},
		"fill the disk of s2; worker 1 said s2 needs a restart (by 3s after the fill)":                                          {true, true, true},
		"write an invalid value into node 3's key":                                                                              {true, true, true},
		"restart every worker at once (SIGKILL)":                                                                                {true, true, true},
		"purge stream KV_flow_state (a new epoch)":                                                                              {true, true, true},
	} {
		assert.Equal(t, want, touched(event{action: action}, workerNames), action)
	}
	assert.Equal(t, []bool{true}, touched(event{action: "SIGSTOP worker for 3s, then SIGCONT"}, []string{"worker"}))
}

// A jump back of a worker's clock delays its timers by the jump: its
// reports may wait that long after the jump.
func TestLivenessWaitsOutTheTimersAJumpBackDelayed(t *testing.T) {
	jump := []event{{start: 9 * sec, heal: 9 * sec, end: 9 * sec, kind: "clock",
		action: "jump the clock of worker 0 by 3s (to 3s from real time) AND jump the clock of worker 1 by -12.5s (to -12.5s from real time)"}}
	held := samplesOf(30*sec, 10*sec)
	for i := range held {
		if held[i].call > 21*sec {
			held[i].oldest, held[i].unanswered = 40*time.Millisecond, 1
		}
	}
	assert.Empty(t, deafWorkers(workerNames, [][]liveSample{samplesOf(30*sec, -1), held, samplesOf(30*sec, -1)}, jump, nil),
		"answered 11 s after a report taken 1 s after a jump back of 12.5 s")
	problems := deafWorkers(workerNames, [][]liveSample{held, samplesOf(30*sec, -1), samplesOf(30*sec, -1)}, jump, nil)
	require.Len(t, problems, 1, "a jump forward delays nothing")
	assert.Contains(t, problems[0], "worker 0 is deaf")
	assert.Equal(t, 12500*time.Millisecond, delayedTimers(jump[0].action, "worker 1"))
	assert.Zero(t, delayedTimers(jump[0].action, "worker 0"))
	assert.Zero(t, delayedTimers(jump[0].action, "worker 2"))
}
