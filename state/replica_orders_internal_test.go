package state

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/kv"
)

// TestReplicaAnswersEveryReportInAnyOrderOfEvents drives a Replica by hand
// through random orders of the events that move its writes: a report
// submitted (numbered, unnumbered, stale, of a new process), the store's
// answer to a put (stored, refused by its condition, lost, stored with
// its answer lost, refused though stored), the sender's turn, another
// worker's write of a node, the watch delivering the next write, Run's
// goroutine answering what those settled, a tick of the clock, Drain
// giving up, and stop. After every event it checks that
// each report is answered at most once, in the order given, an ack only
// at a revision that holds the report itself, and by its deadline
// (ApplyTimeout after Submit, applyTicks+1 ticks at most); after the
// last, that every report was answered, nothing is left in the queue, and
// every write is free for reuse: none waits for an event that will not
// come.
// FLOWSTATE_ORDERS sets the number of orders (100,000 by default, 5,000
// with -short); a failure names the seed that replays it
// (FLOWSTATE_ORDERS_SEED).
func TestReplicaAnswersEveryReportInAnyOrderOfEvents(t *testing.T) {
	orders := 100_000
	if testing.Short() {
		orders = 5_000
	}
	if n, err := strconv.Atoi(os.Getenv("FLOWSTATE_ORDERS")); err == nil && n > 0 {
		orders = n
	}
	base := rand.Uint64()
	if s, err := strconv.ParseUint(os.Getenv("FLOWSTATE_ORDERS_SEED"), 10, 64); err == nil {
		base, orders = s, 1
	}
	for i := range orders {
		seed := base + uint64(i)
		if err := runOrder(seed); err != nil {
			t.Fatalf("seed %d (FLOWSTATE_ORDERS_SEED=%d replays it): %v", seed, seed, err)
		}
	}
	t.Logf("%d orders from seed %d", orders, base)
}

// orderStore is the store of one order: it holds every put until the order
// answers it, and keeps the log of writes that the watch delivers.
type orderStore struct {
	kv.Shared // not called: the order drives the Replica by hand
	puts      []orderPut
	log       []kv.Event
	last      map[uint64]uint64 // node -> its key's last write
}

type orderPut struct {
	node  uint64
	value []byte
	cond  kv.Condition
	done  kv.PutReceiver
}

func (s *orderStore) PutAsync(_ context.Context, key string, value []byte, cond kv.Condition, done kv.PutReceiver) error {
	node, _ := flowstate.NodeOfKey(key)
	s.puts = append(s.puts, orderPut{node: node, value: append([]byte(nil), value...), cond: cond, done: done})
	return nil
}

// store appends a write of node to the log.
func (s *orderStore) store(node uint64, value []byte) kv.Revision {
	rev := kv.Revision{Epoch: "e1", Seq: uint64(len(s.log)) + 1}
	s.log = append(s.log, kv.Event{Op: kv.OpPut, Key: flowstate.NodeKey(node), Value: value, Revision: rev, Exact: true})
	s.last[node] = rev.Seq
	return rev
}

// orderReport is one report of an order and its answer.
type orderReport struct {
	o        *order
	i        int    // its place in the order of the reports
	marker   int64  // the last execution time of its one flow: unique
	deadline uint64 // the tick by which it must be answered
	answers  int
	res      MergeResult
	err      error
}

func (p *orderReport) Complete(res MergeResult, err error) {
	p.answers++
	p.res, p.err = res, err
	o := p.o
	switch {
	case p.answers > 1:
		o.fail("report %d answered twice", p.i)
	case p.i != o.answered:
		o.fail("report %d answered before report %d", p.i, o.answered)
	}
	o.answered++
}

type order struct {
	rnd       *rand.Rand
	r         *Replica
	store     *orderStore
	reports   []*orderReport
	answered  int   // the reports answered so far
	err       error // the first broken rule
	delivered int   // log entries the watch has delivered
	marker    int64
	epochs    map[uint64]uint64 // node -> its flownode's process
	seqs      map[uint64]uint64 // node -> its last seq
	stopped   bool
	writes    map[*write]bool // every write the Replica gave out
}

func (o *order) fail(format string, args ...any) {
	if o.err == nil {
		o.err = fmt.Errorf(format, args...)
	}
}

// report makes a report of node: mostly the node's next numbered one,
// sometimes unnumbered, an older one, or the first of a new process.
func (o *order) report(node uint64) Report {
	o.marker++
	rep := Report{Node: node, Flows: []flowstate.Flow{{ID: 1, Has: flowstate.HasLastExecTime, LastExecTime: o.marker}}}
	switch k := o.rnd.IntN(10); {
	case k == 0:
		return rep // unnumbered
	case k == 1:
		o.epochs[node]++
		o.seqs[node] = 0
	}
	seq := o.seqs[node] + 1
	if o.rnd.IntN(8) == 0 && seq > 2 {
		seq -= 2 // late
	} else {
		o.seqs[node] = seq
	}
	rep.NodeEpoch, rep.HasNodeEpoch = 100+o.epochs[node], true
	rep.Health = &flowstate.Health{Seq: seq, HasSeq: true}
	return rep
}

// another is another worker's write of node: a numbered report of the
// node's process, stored as it is.
func (o *order) another(node uint64) {
	rep := o.report(node)
	o.store.store(node, flowstate.AppendNodeJSON(nil, rep.Flows, rep.NodeEpoch, rep.HasNodeEpoch, rep.Health))
}

// answerPut gives the store's answer to one put in flight.
func (o *order) answerPut() {
	s := o.store
	if len(s.puts) == 0 {
		return
	}
	k := o.rnd.IntN(len(s.puts))
	p := s.puts[k]
	s.puts = append(s.puts[:k], s.puts[k+1:]...)
	met := s.last[p.node] == p.cond.Revision
	switch kind := o.rnd.IntN(10); {
	case kind == 0: // lost on the way: not stored
		p.done.PutDone(kv.Revision{}, fmt.Errorf("put: %w", kv.ErrUnavailable))
	case kind == 1 && met: // stored, its answer lost
		s.store(p.node, p.value)
		p.done.PutDone(kv.Revision{}, fmt.Errorf("put: no answer: %w", kv.ErrUnavailable))
	case kind == 2 && met: // stored, refused by a server's stale view
		s.store(p.node, p.value)
		p.done.PutDone(kv.Revision{}, fmt.Errorf("put: %w", kv.ErrRevisionMismatch))
	case met:
		p.done.PutDone(s.store(p.node, p.value), nil)
	default:
		p.done.PutDone(kv.Revision{}, &kv.MismatchError{Last: s.last[p.node], Err: fmt.Errorf("put: %w", kv.ErrRevisionMismatch)})
	}
}

// step runs one random event.
func (o *order) step() {
	r := o.r
	switch k := o.rnd.IntN(100); {
	case k < 22:
		if len(o.reports)-o.answered >= r.opts.Window {
			return // Submit would wait for a place
		}
		node := uint64(1 + o.rnd.IntN(2))
		p := &orderReport{o: o, i: len(o.reports), marker: o.marker + 1, deadline: r.clock + applyTicks}
		o.reports = append(o.reports, p)
		if err := r.Submit(context.Background(), o.report(node), p); err != nil {
			o.fail("submit: %v", err)
		}
		r.mu.Lock()
		if q := &r.writes; q.len > 0 {
			o.writes[q.ring[(q.first+q.len-1)%len(q.ring)]] = true
		}
		r.mu.Unlock()
	case k < 45:
		o.answerPut()
	case k < 55:
		r.sendPosted()
	case k < 62:
		o.another(uint64(1 + o.rnd.IntN(2)))
	case k < 78:
		if o.delivered < len(o.store.log) {
			ev := o.store.log[o.delivered]
			o.delivered++
			r.onEvent(ev)
		}
	case k < 86: // Run's goroutine, woken by the watch's or the store's events
		select {
		case <-r.answers:
			r.answerReady()
		default:
		}
	case k < 98:
		r.onTick()
		for _, p := range o.reports[o.answered:] {
			if p.answers == 0 && r.clock > p.deadline {
				o.fail("report %d not answered by its deadline (tick %d, now %d)", p.i, p.deadline, r.clock)
			}
		}
	case k < 99:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r.Drain(ctx)
	default:
		if !o.stopped {
			o.stopped = true
			r.stop()
		}
	}
}

// checkAcks checks that every ack names a revision that holds its report.
func (o *order) checkAcks() {
	for _, p := range o.reports {
		if p.answers == 0 || p.err != nil {
			continue
		}
		rev := p.res.Revision
		if rev == 0 || rev > uint64(len(o.store.log)) {
			o.fail("report %d acked at revision %d, past the log's %d", p.i, rev, len(o.store.log))
			continue
		}
		flows, err := flowstate.AppendValueFlows(nil, o.store.log[rev-1].Value)
		if err != nil || len(flows) != 1 || flows[0].LastExecTime != p.marker {
			o.fail("report %d (marker %d) acked at revision %d, which holds %v (%v)", p.i, p.marker, rev, flows, err)
		}
	}
}

func runOrder(seed uint64) error {
	store := &orderStore{last: make(map[uint64]uint64)}
	r, err := NewReplica(store, ReplicaOptions{Window: 8})
	if err != nil {
		return err
	}
	o := &order{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), r: r, store: store,
		epochs: make(map[uint64]uint64), seqs: make(map[uint64]uint64), writes: make(map[*write]bool)}
	r.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
	r.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1"}, Exact: true})
	for range 12 + o.rnd.IntN(40) {
		o.step()
		if o.err != nil {
			return o.err
		}
	}
	// The end: Run stops, the store answers what it holds, the watch
	// delivers the rest.
	if !o.stopped {
		r.stop()
	}
	for len(store.puts) > 0 {
		o.answerPut()
	}
	r.sendPosted()
	for ; o.delivered < len(store.log); o.delivered++ {
		r.onEvent(store.log[o.delivered])
	}
	o.checkAcks()
	if o.err != nil {
		return o.err
	}
	if o.answered != len(o.reports) {
		return fmt.Errorf("%d of %d reports answered once Run stopped", o.answered, len(o.reports))
	}
	q := &r.writes
	if q.len != 0 || len(q.lastOf) != 0 || len(q.overtaken) != 0 || len(r.outbox) != 0 {
		return fmt.Errorf("left after the end: %d in the queue, %d nodes' last writes, %d overtaken, %d to send",
			q.len, len(q.lastOf), len(q.overtaken), len(r.outbox))
	}
	for e := range o.writes {
		if e.phase != free {
			return fmt.Errorf("a write of node %d is %s once every put is answered: nothing will reuse it", e.node, e.phase)
		}
	}
	for _, p := range o.reports {
		if p.err != nil && !errors.Is(p.err, kv.ErrUnavailable) && !errors.Is(p.err, ErrStale) && !errors.Is(p.err, errStopped) {
			return fmt.Errorf("report %d answered %v: neither 503, 409, nor refused once stopped", p.i, p.err)
		}
	}
	return nil
}

// blockingAnswer is a Completion that waits for release before it returns.
type blockingAnswer struct {
	entered  chan struct{}
	release  chan struct{}
	returned atomic.Bool
}

func (b *blockingAnswer) Complete(MergeResult, error) {
	close(b.entered)
	<-b.release
	b.returned.Store(true)
}

// TestReplicaDrainReturnsAfterTheLastAnswer: Drain must not return while
// the last report's Completion still runs (its answer not yet given),
// although the queue is empty by then.
func TestReplicaDrainReturnsAfterTheLastAnswer(t *testing.T) {
	r := newTestReplica(t)
	r.onEvent(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: "e1"}})
	r.onEvent(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: "e1"}, Exact: true})
	b := &blockingAnswer{entered: make(chan struct{}), release: make(chan struct{})}
	go func() { _ = r.Refuse(context.Background(), errors.New("refused"), b) }()
	<-b.entered

	drained := make(chan bool, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r.Drain(ctx)
		drained <- b.returned.Load()
	}()
	// Either Drain returns (at once, were it wrong) or it waits for the
	// answer, which the test sees as an await registered on the Replica.
	for waiting := false; !waiting; {
		select {
		case returned := <-drained:
			t.Fatalf("Drain returned while the last answer was being given (its Completion returned: %t)", returned)
		default:
		}
		r.mu.Lock()
		waiting = r.wait.awaited
		r.mu.Unlock()
		runtime.Gosched()
	}
	close(b.release)
	select {
	case returned := <-drained:
		if !returned {
			t.Fatal("Drain returned before the last Completion did")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return once the last answer was given")
	}
}
