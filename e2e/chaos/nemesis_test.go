package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go/jetstream"
)

// event is one nemesis action, with when it started and ended.
type event struct {
	start, end int64
	action     string
}

// nemesis injects faults at random moments (its RNG is seeded) until its
// context ends, one at a time, each undone before the next one.
type nemesis struct {
	s   *system
	rng *rand.Rand
	h   *history
	js  jetstream.JetStream // nil without JetStream

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

// act injects one fault and undoes it.
func (n *nemesis) act() error {
	s := n.s
	w := n.rng.IntN(len(s.workers))
	start := n.h.now()
	var what string
	var err error
	choices := 4
	if n.js != nil {
		choices = 5
	}
	switch n.rng.IntN(choices) {
	case 0:
		what = "SIGKILL and restart " + s.workers[w].name
		err = s.workers[w].restart(n.h.now)
	case 1:
		d := n.between(500*time.Millisecond, 3*time.Second)
		what = fmt.Sprintf("SIGSTOP %s for %v, then SIGCONT", s.workers[w].name, d.Round(time.Millisecond))
		s.workers[w].signal(syscall.SIGSTOP)
		time.Sleep(d) // the fault's duration, not a synchronisation
		s.workers[w].signal(syscall.SIGCONT)
	case 2:
		i, leader := n.rng.IntN(len(s.servers)), ""
		if n.js != nil && n.rng.IntN(2) == 0 {
			if l := streamLeader(n.js); l >= 0 {
				i, leader = l, " (the stream leader)"
			}
		}
		d := n.between(200*time.Millisecond, 2*time.Second)
		what = fmt.Sprintf("SIGKILL %s%s, restart after %v", s.servers[i].name, leader, d.Round(time.Millisecond))
		s.servers[i].kill()
		time.Sleep(d) // the fault's duration
		if err = s.servers[i].restart(n.h.now); err == nil && n.js != nil {
			err = n.awaitStream()
		}
	case 3:
		what = "restart every worker at once (SIGKILL)"
		var wg sync.WaitGroup
		errs := make([]error, len(s.workers))
		for i, p := range s.workers {
			wg.Go(func() { errs[i] = p.restart(n.h.now) })
		}
		wg.Wait()
		for _, e := range errs {
			err = cmpErr(err, e)
		}
	case 4:
		what = "purge stream " + streamName + " (a new epoch)"
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, serr := n.js.Stream(ctx, streamName)
		if serr == nil {
			serr = st.Purge(ctx)
		}
		cancel()
		if serr != nil {
			what += ": failed: " + serr.Error()
		}
	}
	n.mu.Lock()
	n.log = append(n.log, event{start: start, end: n.h.now(), action: what})
	n.mu.Unlock()
	return err
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
			return fmt.Errorf("chaos: stream %s has no leader %v after a server restart", streamName, startTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// events returns the log so far.
func (n *nemesis) events() []event {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]event(nil), n.log...)
}

func formatEvents(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%12v %12v  %s\n", time.Duration(e.start).Round(time.Millisecond), time.Duration(e.end).Round(time.Millisecond), e.action)
	}
	return b.String()
}

func annotations(evs []event) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, e := range evs {
		out = append(out, porcupine.Annotation{Tag: "nemesis", Start: e.start, End: e.end, Description: e.action, BackgroundColor: "#fdd"})
	}
	return out
}
