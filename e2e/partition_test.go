package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	fsclient "github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/proctest"
	"github.com/flowstate-io/flowstate/internal/wait"
)

// partitionRunsEnv sets how many runs TestEveryWorkerAnswersAfterTheStreamLeaderIsPartitioned
// makes, partitionKindsEnv the faults they take in turn ("stall", "cut";
// comma-separated), and partitionLongEnv ("1") makes each run the full
// experiment (make chaos sets all three). make test stalls the routes
// for 10 s only: after a cut, or a stall long enough for the servers to
// close the routes, the worker on the leader's server takes longer than
// the target to come back on some runs (docs/operating.md, "Failures").
const (
	partitionRunsEnv  = "FLOWSTATE_PARTITION_RUNS"
	partitionKindsEnv = "FLOWSTATE_PARTITION_KINDS"
	partitionLongEnv  = "FLOWSTATE_PARTITION_LONG"
)

// The bounds of the partition test.
const (
	applyTimeout = 2 * time.Second // the worker's apply timeout (state.DefaultApplyTimeout)
	// ackAfterHeal is how soon after the heal every worker acknowledges
	// a report again.
	ackAfterHeal = 5 * time.Second
	// deafAfter is how long after the heal a worker that has not
	// acknowledged is deemed deaf, and the run stops.
	deafAfter = 30 * time.Second
	// waitBound is the longest a report may wait for its answer once the
	// fault has healed: the apply timeout, which the worker's state checks
	// on ticks of an eighth of it (9/8 of it at most), and a second for
	// the worker's goroutines and the scrape on two shared cores.
	waitBound = applyTimeout + time.Second
	// reportEvery is each flownode's pace, and reportTimeout its
	// request's: shorter than the apply timeout, so that a flownode sends
	// its next report while the worker still holds its last one.
	reportEvery   = 120 * time.Millisecond
	reportTimeout = time.Second
)

// partitionShape is one run's size: make test runs a shorter fault with
// fewer flownodes than make chaos, to stay within its budget; a 10 s
// stall is still past the worker's apply timeout and long enough for the
// servers to elect another leader of the stream.
type partitionShape struct {
	nodes     int
	fault     time.Duration // how long the leader's routes stay stalled or cut
	afterHeal time.Duration // how long the flownodes report after the heal
}

func partitionShapeFromEnv() partitionShape {
	if os.Getenv(partitionLongEnv) == "1" {
		return partitionShape{nodes: 24, fault: 20 * time.Second, afterHeal: 20 * time.Second}
	}
	return partitionShape{nodes: 12, fault: 10 * time.Second, afterHeal: 10 * time.Second}
}

// TestEveryWorkerAnswersAfterTheStreamLeaderIsPartitioned runs three
// --kv jetstream workers, one on each server of an R3 cluster, while
// numbered flownodes (the Go client) report every 120 ms with a 1 s
// timeout, sending the next report when one times out. The routes of the
// bucket stream's leader are stalled or cut (FLOWSTATE_PARTITION_KINDS, in turn) for
// the fault's time, then healed. From the heal on, each worker's own
// metrics (each worker counts its acks and shows its oldest unanswered
// report, so that no worker hides behind the queue group) must show that
// it acknowledges a report within 5 s, keeps acknowledging to the end,
// and never holds a report longer than the apply timeout (and a margin);
// once the flownodes stop, every worker has answered every report it took.
func TestEveryWorkerAnswersAfterTheStreamLeaderIsPartitioned(t *testing.T) {
	runs := 3
	if v := os.Getenv(partitionRunsEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, partitionRunsEnv)
		runs = n
	}
	kinds := []string{"stall"}
	if v := os.Getenv(partitionKindsEnv); v != "" {
		kinds = strings.Split(v, ",")
		for _, k := range kinds {
			require.Contains(t, []string{"stall", "cut"}, k, partitionKindsEnv)
		}
	}
	shape := partitionShapeFromEnv()
	for i := range runs {
		kind := kinds[i%len(kinds)]
		t.Run(fmt.Sprintf("%s-%d", kind, i), func(t *testing.T) { partitionRun(t, kind, shape) })
	}
}

func partitionRun(t *testing.T, kind string, shape partitionShape) {
	cl, err := proctest.StartCluster(proctest.ClusterSpec{Path: bin.natsServer, Name: "flowstate", Proxied: true,
		Config: proctest.WorkerServerConfig, StoreDir: func(int) string { return t.TempDir() }, Keep: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Log(err)
		}
	})
	require.NoError(t, cl.AwaitJetStream(30*time.Second))
	urls := cl.URLs()

	// Worker i is on server i alone, so that the leader's server has a
	// worker that the partition cuts off from the stream's new leader.
	var ws []*workerProc
	var addrs, ids []string
	for i := range 3 {
		w := launchWorker(t, nil, "--nats-url", urls[i], "--kv", "jetstream", "--kv-replicas", "3",
			"--kv-storage", "file", "--metrics-addr", "127.0.0.1:0")
		w.awaitReady(ids...)
		ids = append(ids, w.ID)
		ws = append(ws, w)
		addrs = append(addrs, w.waitStderr(metricsListening)[1])
	}

	nc := connect(t, strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	leader := -1
	wait.Until(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		leader = proctest.StreamLeader(js, "KV_"+jsBucket, 2*time.Second)
		return leader >= 0, "the bucket's stream has no leader"
	})

	s := startSampler(addrs)
	defer s.stop()
	nodes := startFlownodes(t, urls, shape.nodes)
	defer nodes.stop()
	// Every worker acknowledges before the fault: the reports reach all
	// three, and the test starts from a live system.
	for w := range ws {
		s.awaitAcks(t, w, s.acks(w)+1, 30*time.Second, "worker %d (%s) acknowledges before the fault", w, ids[w])
	}

	var routes []*proctest.Link
	for j := range urls {
		if j != leader {
			routes = append(routes, cl.Route(leader, j))
		}
	}
	for _, r := range routes {
		if kind == "stall" {
			r.Stall()
		} else {
			r.Cut()
		}
	}
	faulted := time.Now()
	sentAtFault, timedOutAtFault := nodes.sent.Load(), nodes.timedOut.Load()
	// The fault lasts its time: what the test waits for is the end of the
	// experiment's fault, not a fact of the system.
	time.Sleep(shape.fault)
	for _, r := range routes {
		r.Heal()
	}
	healed := time.Now()
	t.Logf("%s the routes of s%d (the stream's leader) for %v: %d reports sent, %d timed out",
		kind, leader, healed.Sub(faulted).Round(time.Millisecond), nodes.sent.Load()-sentAtFault, nodes.timedOut.Load()-timedOutAtFault)
	base := make([]float64, len(ws))
	for w := range ws {
		base[w] = s.acksAt(w, healed)
	}

	// Every worker acknowledges within ackAfterHeal of the heal. It is
	// waited for longer, so that a late worker's delay is measured; one
	// that never acknowledges again is deaf.
	for w := range ws {
		// A sample taken after the heal: one taken before it may show acks
		// given before it, read as the heal went on.
		s.await(t, w, deafAfter, func(smp sample) bool { return smp.at.After(healed) && smp.acks > base[w] },
			"worker %d (%s, on s%d) acknowledges again after the heal", w, ids[w], w)
		took := s.firstAbove(w, base[w], healed).Sub(healed)
		t.Logf("worker %d (on s%d) acknowledged %v after the heal", w, w, took.Round(time.Millisecond))
		assert.LessOrEqual(t, took, ackAfterHeal, "worker %d (%s, on s%d) acknowledges within %v of the heal", w, ids[w], w, ackAfterHeal)
	}
	// The flownodes go on; each worker keeps acknowledging to the end.
	sentAtHeal, timedOutAtHeal := nodes.sent.Load(), nodes.timedOut.Load()
	end := time.Now().Add(shape.afterHeal)
	mid := make([]float64, len(ws))
	for w := range ws {
		mid[w] = s.acks(w)
	}
	time.Sleep(time.Until(end)) // the experiment's length after the heal
	for w := range ws {
		s.awaitAcks(t, w, mid[w]+1, ackAfterHeal, "worker %d (%s) still acknowledges %v after the heal", w, ids[w], shape.afterHeal)
	}
	nodes.stop()
	t.Logf("after the heal: %d reports sent, %d timed out", nodes.sent.Load()-sentAtHeal, nodes.timedOut.Load()-timedOutAtHeal)

	// Once the flownodes stop, every worker answers every report it took.
	for w := range ws {
		s.awaitUnanswered(t, w, applyTimeout+5*time.Second, ids[w])
	}
	s.stop()
	for w := range ws {
		oldest, at := s.maxOldestSince(w, healed)
		assert.LessOrEqual(t, oldest, waitBound.Seconds(),
			"worker %d (%s) held a report %.3f s, %v after the heal: past the apply timeout and a margin", w, ids[w], oldest, at.Sub(healed).Round(time.Millisecond))
		t.Logf("worker %d: the oldest unanswered report seen after the heal had waited %.3f s", w, oldest)
	}
	for w := range ws {
		assert.NoError(t, s.scrapeErr(w), "worker %d's metrics", w)
	}
}

// flownodes report, each node on a connection and a numbering Client of
// its own, every reportEvery, until stop.
type flownodes struct {
	cancel   context.CancelFunc
	done     sync.WaitGroup
	sent     atomic.Int64
	timedOut atomic.Int64
	once     sync.Once
}

// startFlownodes starts n flownodes, node k connected to server k mod 3
// first.
func startFlownodes(t *testing.T, urls []string, n int) *flownodes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &flownodes{cancel: cancel}
	for k := range n {
		order := append(append([]string{}, urls[k%len(urls):]...), urls[:k%len(urls)]...)
		nc := connect(t, strings.Join(order, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		c, err := fsclient.New(nc, fsclient.Options{Timeout: reportTimeout})
		require.NoError(t, err)
		f.done.Add(1)
		go f.run(ctx, c, uint64(k+1))
	}
	return f
}

func (f *flownodes) run(ctx context.Context, c *fsclient.Client, node uint64) {
	defer f.done.Done()
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	for i := 1; ; i++ {
		r := fsclient.Report{NodeID: node, Value: flowstate.FlowStateValue{
			StateSize:       map[flowstate.FlowID]uint64{flowstate.FlowID(node): uint64(i)},
			LastExecTimeMap: map[flowstate.FlowID]int64{flowstate.FlowID(node): int64(i)},
		}}
		_, err := c.Send(ctx, r)
		f.sent.Add(1)
		if errors.Is(err, context.DeadlineExceeded) {
			f.timedOut.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// stop ends the flownodes and waits for them (each within its timeout).
func (f *flownodes) stop() {
	f.once.Do(func() {
		f.cancel()
		f.done.Wait()
	})
}

// sample is one scrape of a worker's metrics.
type sample struct {
	at         time.Time
	acks       float64 // flowstate_acks_total
	oldest     float64 // flowstate_oldest_unanswered_report_seconds
	unanswered float64 // flowstate_unanswered_reports
}

func (s sample) String() string {
	return fmt.Sprintf("at %s: %.0f acks, %.0f reports unanswered, the oldest for %.3f s", s.at.Format("15:04:05.000"), s.acks, s.unanswered, s.oldest)
}

// sampler scrapes every worker's /metrics every 50 ms until stop: what
// each worker itself says of its acks and of its unanswered reports.
type sampler struct {
	addrs []string
	stopc chan struct{}
	done  sync.WaitGroup
	once  sync.Once

	mu      sync.Mutex
	samples [][]sample
	errs    []error // the last scrape error of each worker
	changed chan struct{}
}

func startSampler(addrs []string) *sampler {
	s := &sampler{addrs: addrs, stopc: make(chan struct{}), samples: make([][]sample, len(addrs)),
		errs: make([]error, len(addrs)), changed: make(chan struct{})}
	for w := range addrs {
		s.done.Add(1)
		go s.run(w)
	}
	return s
}

func (s *sampler) run(w int) {
	defer s.done.Done()
	httpc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		smp, err := scrapeSample(httpc, s.addrs[w])
		s.mu.Lock()
		s.errs[w] = err
		if err == nil {
			s.samples[w] = append(s.samples[w], smp)
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		select {
		case <-s.stopc:
			return
		case <-tick.C:
		}
	}
}

func scrapeSample(httpc *http.Client, addr string) (sample, error) {
	at := time.Now()
	resp, err := httpc.Get("http://" + addr + "/metrics")
	if err != nil {
		return sample{}, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return sample{}, err
	}
	smp := sample{at: at}
	found := 0
	for line := range strings.Lines(string(body)) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "flowstate_acks_total":
			dst = &smp.acks
		case "flowstate_oldest_unanswered_report_seconds":
			dst = &smp.oldest
		case "flowstate_unanswered_reports":
			dst = &smp.unanswered
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(v, 64); err != nil {
			return sample{}, fmt.Errorf("%s: %w", line, err)
		}
		found++
	}
	if found != 3 {
		return sample{}, fmt.Errorf("/metrics of %s lacks the acks or the unanswered reports", addr)
	}
	return smp, nil
}

func (s *sampler) stop() {
	s.once.Do(func() {
		close(s.stopc)
		s.done.Wait()
	})
}

// last returns worker w's last sample, and a channel closed at the next.
func (s *sampler) last(w int) (sample, bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.samples[w]); n > 0 {
		return s.samples[w][n-1], true, s.changed
	}
	return sample{}, false, s.changed
}

// acks returns worker w's acks at its last sample.
func (s *sampler) acks(w int) float64 {
	smp, _, _ := s.last(w)
	return smp.acks
}

// awaitAcks waits until worker w's acks reach want, within bound.
func (s *sampler) awaitAcks(t *testing.T, w int, want float64, bound time.Duration, msg string, args ...any) {
	t.Helper()
	s.await(t, w, bound, func(smp sample) bool { return smp.acks >= want }, msg, args...)
}

// awaitUnanswered waits until worker w has no report unanswered, within
// bound.
func (s *sampler) awaitUnanswered(t *testing.T, w int, bound time.Duration, id string) {
	t.Helper()
	s.await(t, w, bound, func(smp sample) bool { return smp.unanswered == 0 },
		"worker %d (%s) answers every report it took within %v of the flownodes' end", w, id, bound)
}

func (s *sampler) await(t *testing.T, w int, bound time.Duration, ok func(sample) bool, msg string, args ...any) {
	t.Helper()
	deadline := time.After(bound)
	for {
		smp, have, next := s.last(w)
		if have && ok(smp) {
			return
		}
		select {
		case <-next:
		case <-deadline:
			s.mu.Lock()
			err := s.errs[w]
			s.mu.Unlock()
			t.Fatalf("%s: not within %v; last sample %v, last scrape error %v", fmt.Sprintf(msg, args...), bound, smp, err)
		}
	}
}

// acksAt returns worker w's acks at its last sample taken at or before
// at (0 if none): a sample with more was taken after at.
func (s *sampler) acksAt(w int, at time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var acks float64
	for _, smp := range s.samples[w] {
		if smp.at.After(at) {
			break
		}
		acks = smp.acks
	}
	return acks
}

// firstAbove returns the time of worker w's first sample after since with
// more acks than base.
func (s *sampler) firstAbove(w int, base float64, since time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, smp := range s.samples[w] {
		if smp.at.After(since) && smp.acks > base {
			return smp.at
		}
	}
	return time.Time{}
}

// maxOldestSince returns the largest age of an unanswered report that
// worker w showed at a scrape after since, and when.
func (s *sampler) maxOldestSince(w int, since time.Time) (float64, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var most float64
	var at time.Time
	for _, smp := range s.samples[w] {
		if smp.at.After(since) && smp.oldest > most {
			most, at = smp.oldest, smp.at
		}
	}
	return most, at
}

// scrapeErr returns worker w's last scrape error, if any.
func (s *sampler) scrapeErr(w int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs[w]
}
