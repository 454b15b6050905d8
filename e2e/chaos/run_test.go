package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	flowclient "github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/protocol"
)

const (
	requestTimeout = 4 * time.Second             // a client's request
	lag            = 10 * time.Second            // an unanswered report takes effect within this of its invocation (partitions hold a message 8 s at most), or never
	quiet          = answerBound + 3*time.Second // clients go on after the nemesis stops: past the liveness check's bound after the last heal
	convergeWithin = 60 * time.Second            // the final gets agree
	finalGets      = 30                          // equal gets in a row that end a run
)

// runConfig is one run: a system, its clients, and the nemesis.
type runConfig struct {
	name      string
	seed      uint64
	duration  time.Duration
	clients   int
	jetstream bool
	faults    faultSet      // none: the nemesis does nothing
	flap      time.Duration // how long a flapping partition lasts
	large     bool          // ballast nodes make the state large (large_test.go)
	worker    string        // the worker binary
	env       []string      // extra environment of the worker
	checkFor  time.Duration
	outDir    string // where a violation is written; "" names one under os.TempDir
}

// runResult is what a run found.
type runResult struct {
	name       string
	ops        int
	events     []event
	recoveries []recovery // one per event
	nemesisID  int        // the client id of the nemesis's own writes
	stale      int        // gets that served a stale state (the README's exception)
	reports    int        // reports sent
	conflicts  int        // reports answered 503 because their write's condition was refused
	stales     int        // reports answered 409: a later report of their node was held
	retired    int        // of those, the reports of a process their node moved away from
	faults     bool       // the run was to inject faults
	verdict    verdict
	problems   []string // final gets that disagree, acked reports lost
	dir        string   // where the violation was written
}

// ok reports whether a run's check found nothing wrong and did not time
// out (a run not made has no verdict, and nothing wrong).
func (r runResult) ok() bool {
	return r.verdict.result != porcupine.Illegal && r.verdict.result != porcupine.Unknown && len(r.problems) == 0
}

// runChaos runs cfg and checks its history.
func runChaos(t *testing.T, cfg runConfig) (res runResult) {
	res.name, res.faults = cfg.name, len(cfg.faults.kinds) > 0
	h := newHistory()
	var s *system
	if cfg.jetstream {
		sc := systemConfig{diskServer: -1, clock: cfg.faults.has(kindClock)}
		if cfg.faults.has(kindDisk) {
			d, err := mountTmpfs(t, diskSize)
			if err != nil {
				t.Skipf("CHAOS_FAULTS has disk, which puts a server's store on a tmpfs the test mounts, and mounting is not permitted here (%v): run as root, or leave disk out of CHAOS_FAULTS", err)
			}
			sc.disk, sc.diskServer = d, int(cfg.seed%3)
			sc.workerArgs = append(sc.workerArgs, "--kv-replica-silence", replicaSilence.String())
		}
		s = startJetStreamSystem(t, h.now, sc)
	} else {
		s = startMemorySystem(t, h.now, cfg.worker, cfg.env...)
	}
	lctx, stopSampling := context.WithCancel(context.Background())
	defer stopSampling()
	var names []string
	for _, w := range s.workers {
		names = append(names, w.name)
	}
	live := sampleLiveness(lctx, names, s.metrics, h.now)
	ctx, stopClients := context.WithCancel(context.Background())
	defer stopClients()
	var wg sync.WaitGroup
	numbers := newNumbering(uint64(h.origin.UnixMilli()))
	for i := range cfg.clients {
		nc, err := s.connect(fmt.Sprintf("chaos client %d", i))
		require.NoError(t, err)
		defer nc.Close()
		c := &client{id: i, nc: nc, rng: rand.New(rand.NewPCG(cfg.seed, uint64(i)+1)), h: h, timeout: requestTimeout, pause: 50 * time.Millisecond, numbers: numbers}
		if cfg.large {
			c.pause = largePause
			c.chunked, err = flowclient.New(nc, flowclient.Options{Timeout: requestTimeout})
			require.NoError(t, err)
		}
		wg.Go(func() { c.run(ctx) })
	}
	if cfg.large {
		bnc, err := s.connect("chaos ballast")
		require.NoError(t, err)
		defer bnc.Close()
		for b := range ballastNodes {
			wg.Go(func() { sendBallast(ctx, bnc, h, cfg.clients+2+b, b) })
		}
	}
	unc, err := s.connect("chaos updates")
	require.NoError(t, err)
	defer unc.Close()
	updates, err := watchUpdates(unc, h.now)
	require.NoError(t, err)
	nc, err := s.connect("chaos nemesis")
	require.NoError(t, err)
	defer nc.Close()
	nem := &nemesis{s: s, rng: rand.New(rand.NewPCG(cfg.seed, 0)), h: h, nc: nc, kinds: cfg.faults.kinds,
		combo: cfg.faults.combo, flap: cfg.flap, id: cfg.clients + 1}
	if cfg.jetstream {
		nem.js, err = jetstream.New(nc)
		require.NoError(t, err)
		nem.forget.dir = t.TempDir()
	}
	nctx, stopNemesis := context.WithTimeout(context.Background(), cfg.duration)
	defer stopNemesis()
	var nemErr error
	if len(cfg.faults.kinds) > 0 {
		nemErr = nem.run(nctx)
	} else {
		<-nctx.Done()
	}
	<-time.After(quiet) // the clients go on without faults for a while
	stopClients()
	wg.Wait()
	res.events = nem.events()
	defer func() { res.report(t, cfg, s, nem, h) }()
	require.NoError(t, nemErr, "nemesis log:\n%s", formatEvents(nem.events(), nil))

	last := s.finalGets(t, h, cfg.clients)
	stopSampling()
	ops := h.snapshot()
	if p := os.Getenv("CHAOS_DUMP"); p != "" {
		require.NoError(t, dumpHistory(p+"-"+cfg.name+".json", ops))
	}
	res.problems = append(res.problems, lostAcks(ops, last)...)
	res.problems = append(res.problems, unexpectedRejections(ops)...)
	fresh, stale := splitStale(ops)
	res.stale = len(stale)
	res.problems = append(res.problems, staleProblems(fresh, stale, s.staleWindows(res.events))...)
	res.nemesisID = nem.id
	res.recoveries = recoveries(res.events, fresh, updates.snapshot(), nem.id, h.now())
	res.problems = append(res.problems, twoStates(fresh)...)
	res.problems = append(res.problems, olderShown(fresh)...)
	res.problems = append(res.problems, staleAnswers(ops)...)
	res.problems = append(res.problems, deafWorkers(names, live.snapshot(), res.events, ops)...)
	res.verdict = check(fresh, s.opens(), forgotAt(res.events), lag, cfg.checkFor)
	res.ops = res.verdict.ops
	for _, o := range ops {
		if o.in.kind == opReport {
			res.reports++
			if o.out.conflict {
				res.conflicts++
			}
			if o.out.status == stStale {
				res.stales++
			}
			if o.out.retired {
				res.retired++
			}
		}
	}
	return res
}

// report logs the run, and writes what a failed one (or any, with
// CHAOS_KEEP set) needs to be understood.
func (r *runResult) report(t *testing.T, cfg runConfig, s *system, nem *nemesis, h *history) {
	v := r.verdict
	t.Logf("%s: seed %d, %d operations checked in %d epoch partitions in %v: %v; %d faults injected (%s); %d stale gets; %d of %d reports answered 409 (stale), %d of them of a process the node moved away from",
		cfg.name, cfg.seed, v.ops, v.partitions, v.took.Round(time.Millisecond), resultWord(v.result), len(r.events), countKinds(r.events), r.stale, r.stales, r.reports, r.retired)
	lines, _, _ := summarize(r.recoveries)
	for _, l := range lines {
		t.Logf("%s: recovery after the heal, %s", cfg.name, l)
	}
	details := r.details(h.snapshot())
	if os.Getenv("CHAOS_DURATION") != "" {
		t.Logf("%s: nemesis log (start, heal, end):\n%s", cfg.name, formatEvents(r.events, details))
	}
	for _, p := range r.problems {
		t.Logf("%s: %s", cfg.name, p)
	}
	if r.ok() && !t.Failed() && os.Getenv("CHAOS_KEEP") == "" {
		return
	}
	r.dir = cfg.outDir
	if r.dir == "" {
		r.dir = filepath.Join(os.TempDir(), fmt.Sprintf("flowstate-chaos-%s-seed-%d", cfg.name, cfg.seed))
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Errorf("chaos: %v", err)
		return
	}
	evs := nem.events()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(r.dir, name), []byte(body), 0o644); err != nil {
			t.Errorf("chaos: %v", err)
		}
	}
	write("nemesis.log", formatEvents(evs, details))
	var logs strings.Builder
	for _, p := range s.servers {
		fmt.Fprintf(&logs, "== %s\n%s\n", p.Name(), p.Output())
	}
	for _, p := range s.workers {
		fmt.Fprintf(&logs, "== %s\n%s\n", p.name, p.Output())
	}
	write("processes.log", logs.String())
	if err := dumpHistory(filepath.Join(r.dir, "history.json"), h.snapshot()); err != nil {
		t.Errorf("chaos: %v", err)
	}
	if err := dumpCheckInputs(filepath.Join(r.dir, checkInputsFile), checkInputs{Opens: s.opens(), Forgets: forgotAt(evs)}); err != nil {
		t.Errorf("chaos: %v", err)
	}
	if v.model.Step != nil {
		v.info.AddAnnotations(annotations(evs))
		if err := porcupine.VisualizePath(v.model, v.info, filepath.Join(r.dir, "history.html")); err != nil {
			t.Errorf("chaos: visualisation: %v", err)
		}
	}
	t.Logf("%s: the history (history.html), the nemesis log and the processes' output are in %s", cfg.name, r.dir)
}

func resultWord(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "NOT linearizable"
	default:
		return "unknown (the check timed out)"
	}
}

// opens returns the start time of each memory worker instance's epoch, so
// that a report unanswered by a killed instance is not expected in the next
// one. A JetStream epoch starts with a purge and is shared: none.
func (s *system) opens() map[string]int64 {
	if s.jetstream {
		return nil
	}
	out := map[string]int64{}
	for _, w := range s.workers {
		for _, in := range w.epochs() {
			if in.epoch != "" {
				out[in.epoch] = in.start
			}
		}
	}
	return out
}

// forgotAt returns when the faults that may have made the store forget
// acknowledged writes (every store rolled back) began to roll back.
func forgotAt(evs []event) []int64 {
	var out []int64
	for _, e := range evs {
		if e.lost {
			out = append(out, e.heal)
		}
	}
	return out
}

// twoStates returns the gets that show another state than a get before
// them at the same epoch and revision.
func twoStates(fresh []op) []string {
	type version struct {
		epoch string
		rev   uint64
	}
	states := map[version]op{}
	var problems []string
	for _, o := range fresh {
		if o.in.kind != opGet || o.out.status != stOK {
			continue
		}
		v := version{o.out.epoch, o.out.rev}
		if p, ok := states[v]; !ok {
			states[v] = o
		} else if (p.out.agg != o.out.agg || p.out.marks != o.out.marks) && len(problems) < 5 {
			problems = append(problems, fmt.Sprintf("two states at epoch %s revision %d: %s%s and %s%s",
				v.epoch, v.rev, describeReport(p.out.agg), describeMarks(p.out.marks), describeReport(o.out.agg), describeMarks(o.out.marks)))
		}
	}
	return problems
}

// staleWindows returns when a JetStream worker may serve a stale get: from
// a nats-server's kill (or every server's stop by a forget fault), or a
// worker's SIGSTOP, until staleGrace after it is undone. (A paused worker's read barrier times out in the pause, and it
// answers the gets queued meanwhile from its old state.) A memory worker
// never may.
func (s *system) staleWindows(evs []event) [][2]int64 {
	var out [][2]int64
	for _, e := range evs {
		if s.jetstream && (strings.Contains(e.action, "SIGKILL nats-server") || strings.Contains(e.action, "SIGSTOP") || strings.Contains(e.kind, kindForget)) {
			out = append(out, [2]int64{e.start, e.end + int64(staleGrace)})
		}
	}
	return out
}

// finalGets gets the state, recording each get, until finalGets gets in a
// row agree and every worker answered one of them; it returns the last.
// The gets go out through each server in turn: a server hands a request
// to a member of the queue group connected to it when there is one, so
// gets sent through one server may never reach a worker on another.
func (s *system) finalGets(t *testing.T, h *history, id int) op {
	var clients []*client
	for _, url := range strings.Split(s.urls, ",") {
		nc, err := connectTo(url, "chaos final gets")
		require.NoError(t, err)
		defer nc.Close()
		clients = append(clients, &client{id: id, nc: nc, h: h, timeout: requestTimeout})
	}
	nc := clients[0].nc
	sent := 0 // gets sent, each through the next server
	deadline := time.Now().Add(convergeWithin)
	var last op
	var before map[string]int
	for n := 0; ; {
		require.True(t, time.Now().Before(deadline), "the workers' gets did not agree %d times in a row within %v; last: %s",
			finalGets, convergeWithin, describeOp(last.in, last.out))
		if n == 0 {
			before = getCounts(t, nc)
		}
		o := clients[sent%len(clients)].do(input{kind: opGet})
		sent++
		h.add(o)
		switch {
		case o.out.status != stOK:
			n = 0
			time.Sleep(50 * time.Millisecond) // a worker is not ready yet
			continue
		case n > 0 && (o.out.epoch != last.out.epoch || o.out.rev != last.out.rev || o.out.agg != last.out.agg):
			n = 0
		}
		last = o
		if n++; n < finalGets {
			continue
		}
		after := getCounts(t, nc)
		all := len(after) == len(s.workers) // every worker answered $SRV.STATS
		for id, k := range after {
			all = all && k > before[id]
		}
		if all {
			return last
		}
		n = 0
	}
}

// getCounts returns how many gets each worker instance has answered.
func getCounts(t *testing.T, nc *nats.Conn) map[string]int {
	t.Helper()
	out := statCounts(nc)
	require.NotNil(t, out, "ask the workers' stats")
	return out
}

// statCounts returns how many gets each worker instance that answered the
// service's stats within a while has answered; nil if it could not ask.
func statCounts(nc *nats.Conn) map[string]int {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil
	}
	defer sub.Unsubscribe()
	if nc.PublishRequest("$SRV.STATS."+protocol.ServiceName, inbox, nil) != nil {
		return nil
	}
	out := map[string]int{}
	for {
		msg, err := sub.NextMsg(300 * time.Millisecond)
		if err != nil {
			return out
		}
		var st micro.Stats
		if json.Unmarshal(msg.Data, &st) != nil {
			continue
		}
		for _, e := range st.Endpoints {
			if e.Name == "get" {
				out[st.ID] = e.NumRequests
			}
		}
	}
}

// lostAcks checks that the last acked report of every node in the final
// epoch, unless another report of the node may have taken effect after it,
// is in the final state.
func lostAcks(ops []op, final op) []string {
	var problems []string
	for n := range nNodes {
		var last *op
		for i := range ops {
			o := &ops[i]
			if o.in.kind == opReport && o.in.node == n && o.out.status == stOK && o.out.epoch == final.out.epoch &&
				(last == nil || o.call > last.call) {
				last = o
			}
		}
		if last == nil {
			continue
		}
		superseded := false
		for i := range ops {
			o := &ops[i]
			if o == last || o.in.kind != opReport || o.in.node != n || o.out.status == stRejected || o.out.status == stStale {
				continue
			}
			end := o.ret
			if o.out.status == stUnknown {
				end = max(end, o.call+int64(lag))
			}
			superseded = superseded || end >= last.call && (o.out.status == stUnknown || o.out.epoch == final.out.epoch)
		}
		if superseded {
			continue
		}
		for f := range nFlows {
			for k := range 3 {
				if final.out.agg[f][k] < last.in.report[f][k] {
					problems = append(problems, fmt.Sprintf("node %d's last acked report is lost: %s; final state %s",
						n+1, describeOp(last.in, last.out), describeReport(final.out.agg)))
					return problems
				}
			}
		}
	}
	return problems
}

// unexpectedRejections lists valid reports answered 4xx and invalid ones
// not rejected (acked invalid reports are also the model's violations).
func unexpectedRejections(ops []op) []string {
	var problems []string
	for _, o := range ops {
		if o.in.kind == opReport && o.out.status == stRejected && o.out.code != "no responders" {
			problems = append(problems, "a valid report was rejected: "+describeOp(o.in, o.out))
		}
		if len(problems) == 5 {
			break
		}
	}
	return problems
}
