package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The clients of a run, each on its own connection; fewer with a large
// state, whose gets carry 1.3 MB each.
const (
	clients      = 24
	largeClients = 8
)

// How long a flapping partition lasts in a long run, and in the short one.
const (
	flapFor   = 20 * time.Second
	shortFlap = 4 * time.Second
)

// TestChaosShort is the short run of `make test`: a fixed seed, about 20 s
// of process faults, partitions and clock faults on the JetStream cluster
// and, at the same time, process faults on a memory worker.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes 20 s")
	}
	const seed = 4 // its draws include each of the three kinds
	t.Logf("seed %d", seed)
	runBoth(t, runSpec{seed: seed, duration: 20 * time.Second, faults: faultSet{kinds: []string{kindProcess, kindPartition, kindClock}}, flap: shortFlap})
}

// TestChaosLong is `make chaos`: CHAOS_DURATION of faults (unset: the test
// is skipped) of the kinds CHAOS_FAULTS names (unset: every kind), once
// per seed: the seeds CHAOS_SEED lists (comma-separated), or CHAOS_RUNS
// random ones (default 1), one run after the other. Each run prints its
// seed first and one line of figures last; a campaign of several ends with
// one line naming the seeds that passed and those that failed.
func TestChaosLong(t *testing.T) {
	env := os.Getenv("CHAOS_DURATION")
	if env == "" {
		t.Skip("set CHAOS_DURATION (make chaos)")
	}
	d, err := time.ParseDuration(env)
	require.NoError(t, err, "CHAOS_DURATION (for example 10m)")
	faults, err := parseFaults(os.Getenv("CHAOS_FAULTS"))
	require.NoError(t, err)
	seeds, err := chaosSeeds(os.Getenv("CHAOS_SEED"), os.Getenv("CHAOS_RUNS"))
	require.NoError(t, err)
	large := false
	switch st := os.Getenv("CHAOS_STATE"); st {
	case "":
	case "large":
		large = true
	default:
		t.Fatalf("CHAOS_STATE=%q: the only variant is large (20,000 flows)", st)
	}
	var passed, failed []string
	for _, seed := range seeds {
		ok := t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
			chaosRun(t, runSpec{seed: seed, duration: d, faults: faults, flap: flapFor, large: large})
		})
		if ok {
			passed = append(passed, strconv.FormatUint(seed, 10))
		} else {
			failed = append(failed, strconv.FormatUint(seed, 10))
		}
	}
	if len(seeds) > 1 {
		fmt.Printf("chaos: %d runs of %v: %d passed [%s], %d failed [%s]\n", len(seeds), d,
			len(passed), strings.Join(passed, " "), len(failed), strings.Join(failed, " "))
	}
}

// maxChaosRuns bounds CHAOS_RUNS.
const maxChaosRuns = 100

// chaosSeeds returns the seeds of a campaign: those of list
// (comma-separated), if any, or runs random ones (default 1).
func chaosSeeds(list, runs string) ([]uint64, error) {
	if list != "" {
		var seeds []uint64
		for _, f := range strings.Split(list, ",") {
			seed, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("CHAOS_SEED: %q is not a seed (a number, or numbers separated by commas)", f)
			}
			seeds = append(seeds, seed)
		}
		return seeds, nil
	}
	n := 1
	if runs != "" {
		var err error
		if n, err = strconv.Atoi(runs); err != nil || n < 1 || n > maxChaosRuns {
			return nil, fmt.Errorf("CHAOS_RUNS=%q: a number of runs from 1 to %d", runs, maxChaosRuns)
		}
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = rand.Uint64() >> 1
	}
	return seeds, nil
}

// chaosRun is one run of a campaign: it prints the seed first and one line
// of figures last.
func chaosRun(t *testing.T, spec runSpec) {
	fmt.Printf("chaos: seed %d, %v of faults (%s)%s (CHAOS_SEED=%d replays it)\n", spec.seed, spec.duration, spec.faults,
		map[bool]string{true: ", a large state", false: ""}[spec.large], spec.seed)
	js, mem := runBoth(t, spec)
	verdict := "linearizable"
	for _, r := range []runResult{js, mem} {
		switch {
		case r.verdict.result == porcupine.Unknown && len(r.problems) == 0:
			if verdict == "linearizable" {
				verdict = "unknown: the check timed out (see " + r.dir + ")"
			}
		case !r.ok():
			verdict = "NOT linearizable or inconsistent (see " + r.dir + ")"
		}
	}
	if t.Failed() && verdict == "linearizable" {
		verdict = "not checked: the run failed"
	}
	for _, r := range []runResult{js, mem} {
		lines, _, _ := summarize(r.recoveries)
		for _, l := range lines {
			fmt.Printf("chaos: %s: recovery after the heal, %s\n", r.name, l)
		}
	}
	_, worst, _ := summarize(append(append([]recovery(nil), js.recoveries...), mem.recoveries...))
	fmt.Printf("chaos: seed %d: %d operations checked (jetstream %d, memory %d), %d faults injected (%s), history %s; worst recovery %s; %d stale gets (allowed around server kills and worker pauses); %d of %d reports answered 503 as a write conflict (%s); %d answered 409 as stale (%s; %d of a process the node moved away from)\n",
		spec.seed, js.ops+mem.ops, js.ops, mem.ops, len(js.events)+len(mem.events), countKinds(append(append([]event(nil), js.events...), mem.events...)),
		verdict, worst, js.stale+mem.stale, js.conflicts+mem.conflicts, js.reports+mem.reports, perThousand(js.conflicts+mem.conflicts, js.reports+mem.reports),
		js.stales+mem.stales, perThousand(js.stales+mem.stales, js.reports+mem.reports), js.retired+mem.retired)
}

// perThousand formats n of total per thousand.
func perThousand(n, total int) string {
	if total == 0 {
		return "no report"
	}
	return fmt.Sprintf("%.2f per 1,000", 1000*float64(n)/float64(total))
}

// runSpec is what both systems of a run share.
type runSpec struct {
	seed     uint64
	duration time.Duration
	faults   faultSet
	flap     time.Duration
	large    bool
}

// runBoth runs the JetStream cluster and the memory worker side by side,
// the memory worker only if a kind of faults applies to it.
func runBoth(t *testing.T, r runSpec) (js, mem runResult) {
	checkFor := max(30*time.Second, r.duration/2)
	n := clients
	if r.large {
		n = largeClients
	}
	t.Run("run", func(t *testing.T) { // returns once both have run
		t.Run("jetstream", func(t *testing.T) {
			t.Parallel()
			js = runChaos(t, runConfig{name: "jetstream", seed: r.seed, duration: r.duration, clients: n, jetstream: true,
				faults: r.faults, flap: r.flap, large: r.large, worker: bin.worker, checkFor: checkFor})
			requireOK(t, js)
		})
		memFaults := r.faults.forMemory()
		if len(memFaults.kinds) == 0 {
			return
		}
		t.Run("memory", func(t *testing.T) {
			t.Parallel()
			mem = runChaos(t, runConfig{name: "memory", seed: r.seed, duration: r.duration, clients: n,
				faults: memFaults, large: r.large, worker: bin.worker, checkFor: checkFor})
			requireOK(t, mem)
		})
	})
	return js, mem
}

func requireOK(t *testing.T, r runResult) {
	t.Helper()
	assert.Empty(t, r.problems)
	assert.NotEqual(t, porcupine.Illegal, r.verdict.result, "the history is not linearizable; first operations that cannot be:\n%s",
		joinLines(r.verdict.first))
	// A check that timed out proved nothing: the run does not pass, and its
	// history is written, for CHAOS_REPLAY with a longer
	// CHAOS_REPLAY_TIMEOUT.
	assert.NotEqual(t, porcupine.Unknown, r.verdict.result, "the linearizability check timed out after %v", r.verdict.took.Round(time.Second))
	if r.faults {
		assert.NotEmpty(t, r.events, "faults injected")
	}
}

// TestChaosCatchesBrokenWorker runs the checker against a worker built with
// the chaosbug tag, whose every fourth ack names the revision before the
// write: the check must find the history not linearizable.
func TestChaosCatchesBrokenWorker(t *testing.T) {
	out := t.TempDir()
	r := runChaos(t, runConfig{name: "broken", seed: 2, duration: 3 * time.Second, clients: 8,
		worker: bin.brokenWorker, env: []string{"FLOWSTATE_CHAOSBUG=1"}, checkFor: 30 * time.Second, outDir: out})
	require.Equal(t, porcupine.Illegal, r.verdict.result, "the broken worker's history must not be linearizable")
	require.NotEmpty(t, r.verdict.first)
	t.Logf("first operations that cannot be linearised:\n%s", joinLines(r.verdict.first))
	require.FileExists(t, out+"/history.html")
	require.FileExists(t, out+"/nemesis.log")
}

func joinLines(lines []string) string {
	s := ""
	for _, l := range lines {
		s += "  " + l + "\n"
	}
	return s
}

// TestChaosReplayCheck checks a history that a run dumped (CHAOS_DUMP=path
// writes path-<run>.json; a failed run writes history.json, with the
// check's other inputs in check.json beside it); CHAOS_REPLAY names the
// file.
func TestChaosReplayCheck(t *testing.T) {
	path := os.Getenv("CHAOS_REPLAY")
	if path == "" {
		t.Skip("set CHAOS_REPLAY to a dumped history")
	}
	ops, err := loadHistory(path)
	require.NoError(t, err)
	fresh, stale := splitStale(ops)
	t.Logf("%d stale gets", len(stale))
	if s := os.Getenv("CHAOS_REPLAY_UNTIL"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err)
		var cut []op
		for _, o := range fresh {
			if o.call < int64(d) {
				cut = append(cut, o)
			}
		}
		fresh = cut
	}
	replayLag := lag
	if s := os.Getenv("CHAOS_REPLAY_LAG"); s != "" {
		replayLag, _ = time.ParseDuration(s)
	}
	for _, p := range append(olderShown(fresh), staleAnswers(ops)...) {
		t.Log(p)
	}
	inputs, err := loadCheckInputs(path)
	require.NoError(t, err)
	v := check(fresh, inputs.Opens, inputs.Forgets, replayLag, replayTimeout())
	t.Logf("%d operations, %d partitions, %v in %v; first:\n%s", v.ops, v.partitions, resultWord(v.result), v.took, joinLines(v.first))
}

// replayTimeout bounds a replayed check: CHAOS_REPLAY_TIMEOUT, default 1m.
func replayTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("CHAOS_REPLAY_TIMEOUT")); err == nil {
		return d
	}
	return time.Minute
}
