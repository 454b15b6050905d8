package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/internal/clock"
)

// event is one nemesis action: when it started, when it was undone (heal;
// the recovery times count from there) and when it ended.
type event struct {
	start, heal, end int64
	kind             string // the fault kind (kinds.go), "+" joined for two at once
	action           string
	lost             bool // the store may have forgotten acknowledged writes (forget_test.go)
}

// fault is one fault of a kind: inject breaks something, heal undoes it
// after hold. A fault that needs no undoing (a purge, a corrupt write)
// has no heal and no hold.
type fault struct {
	kind, what string
	inject     func() error
	hold       time.Duration
	heal       func() error
	lost       bool // the heal rolls every store back: acknowledged writes may be forgotten
}

// nemesis injects faults of its kinds at random moments (its RNG is
// seeded) until its context ends, one at a time (or two at once: combo),
// each undone before the next one.
type nemesis struct {
	s     *system
	rng   *rand.Rand
	h     *history
	nc    *nats.Conn          // the nemesis's own connection, to every server directly
	js    jetstream.JetStream // nil without JetStream
	kinds []string            // the kinds it injects (kinds.go)
	drawn map[string]int      // how many faults of each kind pickKind drew
	combo bool                // sometimes two faults at once
	flap  time.Duration       // how long a flapping partition lasts
	id    int                 // the client id of its own writes in the history

	clocks []clock.Control // each worker's clock setting (clock faults)
	forget forgetState     // the snapshot the forget faults roll back to

	mu  sync.Mutex // guards log
	log []event
}

// run injects faults until ctx ends; it returns the first error of a
// process that did not come back.
func (n *nemesis) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(n.between(300*time.Millisecond, 2*time.Second)):
		}
		if err := n.act(); err != nil {
			return err
		}
	}
}

func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)+1))
}

// act injects one fault, or two at once, and undoes it.
func (n *nemesis) act() error {
	if n.combo && n.rng.IntN(4) == 0 {
		if a, b, ok := n.pair(); ok {
			return n.twoAtOnce(a, b)
		}
	}
	f, err := n.draw(n.pickKind())
	if err != nil {
		return err
	}
	return n.perform(f)
}

// weights are how often each kind is drawn, relative to the others: a disk
// fault holds the nemesis for half a minute (a full disk leaves its server
// behind until it is restarted), and a forget fault stops every server
// once or twice, so they come less often.
var weights = map[string]int{kindProcess: 3, kindPartition: 3, kindDisk: 1, kindCorrupt: 2, kindClock: 2, kindForget: 1}

// coverEach is how many faults of each kind a run draws before the
// weights decide: a short run of a few kinds injects each of them.
const coverEach = 2

// pickKind draws one of the nemesis's kinds by weight, among those drawn
// fewer than coverEach times while there are such.
func (n *nemesis) pickKind() string {
	if n.drawn == nil {
		n.drawn = map[string]int{}
	}
	kinds := n.kinds
	var short []string
	for _, k := range n.kinds {
		if n.drawn[k] < coverEach {
			short = append(short, k)
		}
	}
	if len(short) > 0 {
		kinds = short
	}
	total := 0
	for _, k := range kinds {
		total += weights[k]
	}
	x := n.rng.IntN(total)
	k := kinds[0]
	for _, c := range kinds {
		if x -= weights[c]; x < 0 {
			k = c
			break
		}
	}
	n.drawn[k]++
	return k
}

// draw returns a fault of kind.
func (n *nemesis) draw(kind string) (*fault, error) {
	switch kind {
	case kindProcess:
		return n.processFault(), nil
	case kindPartition:
		return n.partitionFault(), nil
	case kindDisk:
		return n.diskFault(), nil
	case kindCorrupt:
		return n.corruptFault(), nil
	case kindClock:
		return n.clockFault(), nil
	case kindForget:
		return n.forgetFault(), nil
	}
	return nil, fmt.Errorf("chaos: no fault kind %q", kind)
}

// perform injects f, holds it and heals it, and logs it.
func (n *nemesis) perform(f *fault) error {
	start := n.h.now()
	err := f.inject()
	heal := n.h.now()
	if err == nil && f.heal != nil {
		time.Sleep(f.hold) // the fault's duration, not a synchronisation
		heal = n.h.now()
		err = f.heal()
	}
	n.record(event{start: start, heal: heal, end: n.h.now(), kind: f.kind, action: f.what, lost: f.lost})
	return err
}

// pair draws two faults to inject together, as far as the kinds allow: a
// partition with a kill, or a worker paused while its clock jumps (as a
// virtual machine that resumes with its clock stepped).
func (n *nemesis) pair() (*fault, *fault, bool) {
	var opts [][2]*fault
	if slices.Contains(n.kinds, kindPartition) {
		opts = append(opts, [2]*fault{n.partitionFault(), n.killFault()})
	}
	if slices.Contains(n.kinds, kindClock) {
		w := n.rng.IntN(len(n.s.workers))
		opts = append(opts, [2]*fault{n.pauseWorker(w), n.clockJump(w)})
	}
	if len(opts) == 0 {
		return nil, nil, false
	}
	o := opts[n.rng.IntN(len(opts))]
	return o[0], o[1], true
}

// twoAtOnce injects a, then b while a holds; heals b, then a, which holds
// for a.hold whatever b's heal takes (b's heal, a worker's restart, runs
// meanwhile): a partition holds a message no longer in a pair than alone,
// as the checker's lag assumes. A process that b restarts may not come
// back while a holds (a worker cut from every server exits at start-up
// once JetStream has not answered for 15 s): it is started again once a
// is healed, as a supervisor would, and the event says so.
func (n *nemesis) twoAtOnce(a, b *fault) error {
	start, began := n.h.now(), time.Now()
	healedB := make(chan error, 1) // b's heal, run while a holds
	err := a.inject()
	if err == nil {
		err = b.inject()
	}
	if err == nil && b.heal != nil {
		time.Sleep(min(a.hold, b.hold)) // the faults' overlap
		go func() { healedB <- b.heal() }()
	} else {
		healedB <- nil
	}
	time.Sleep(max(0, a.hold-time.Since(began)))
	heal := n.h.now()
	if a.heal != nil {
		err = cmpErr(err, a.heal())
	}
	retry := <-healedB // b's heal that failed while a held
	what := a.what + " WITH " + b.what
	if retry != nil && err == nil {
		what += "; " + firstLine(retry.Error()) + ": done again after the heal"
		err = b.heal()
	}
	n.record(event{start: start, heal: heal, end: n.h.now(), kind: a.kind + "+" + b.kind, action: what})
	return err
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func (n *nemesis) record(e event) {
	n.mu.Lock()
	n.log = append(n.log, e)
	n.mu.Unlock()
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// awaitStream waits, bounded, until the bucket's stream has a leader again,
// so that the next fault does not compound this one.
func (n *nemesis) awaitStream() error {
	deadline := time.Now().Add(startTimeout)
	for streamLeader(n.js) < 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: stream %s has no leader %v after a fault was undone", streamName, startTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// publish publishes msg to the bucket's stream and returns the stream's
// acknowledgement.
func (n *nemesis) publish(msg *nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return n.js.PublishMsg(ctx, msg)
}

// events returns the log so far.
func (n *nemesis) events() []event {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]event(nil), n.log...)
}

// formatEvents lists the events, each followed by its line of details
// if any.
func formatEvents(evs []event, details []string) string {
	var b strings.Builder
	for i, e := range evs {
		fmt.Fprintf(&b, "%12v %12v %12v  %-18s %s\n", ms(e.start), ms(e.heal), ms(e.end), e.kind, e.action)
		if i < len(details) {
			fmt.Fprintf(&b, "%40s %s\n", "", details[i])
		}
	}
	return b.String()
}

func ms(t int64) time.Duration { return time.Duration(t).Round(time.Millisecond) }

func annotations(evs []event) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, e := range evs {
		out = append(out, porcupine.Annotation{Tag: "nemesis", Start: e.start, End: e.end, Description: e.action, BackgroundColor: "#fdd"})
	}
	return out
}
