package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// answerBound is how long a worker may hold a report it took before it
// answers it: the apply timeout (2 s), within which the worker answers
// every report whatever the store does, and a margin of 5 s (the worker's
// own readiness limit, consumer.DefaultUnansweredLimit).
const answerBound = 7 * time.Second

// sampleEvery is how often each worker's metrics are read.
const sampleEvery = 200 * time.Millisecond

// liveSample is one read of a worker's /metrics: what the worker itself
// says of the reports it took and has not answered.
type liveSample struct {
	call       int64         // the history's clock when the scrape was sent
	unanswered float64       // flowstate_unanswered_reports
	oldest     time.Duration // flowstate_oldest_unanswered_report_seconds
}

// liveness reads every worker's metrics every sampleEvery until its
// context ends. A worker that does not answer (paused, killed, restarting)
// has no sample meanwhile.
type liveness struct {
	names []string
	mu    sync.Mutex // guards samples
	// samples[w] are worker w's, in the order taken.
	samples [][]liveSample
	done    sync.WaitGroup
}

// sampleLiveness starts reading the metrics at addrs (host:port, one per
// worker, named by names) on the history's clock now.
func sampleLiveness(ctx context.Context, names, addrs []string, now func() int64) *liveness {
	l := &liveness{names: names, samples: make([][]liveSample, len(addrs))}
	for w, addr := range addrs {
		l.done.Go(func() {
			httpc := &http.Client{Timeout: time.Second}
			tick := time.NewTicker(sampleEvery)
			defer tick.Stop()
			for {
				if s, ok := scrapeLiveness(ctx, httpc, addr, now); ok {
					l.mu.Lock()
					l.samples[w] = append(l.samples[w], s)
					l.mu.Unlock()
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	return l
}

// snapshot waits until the sampling has stopped and returns the samples.
func (l *liveness) snapshot() [][]liveSample {
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.samples
}

func scrapeLiveness(ctx context.Context, httpc *http.Client, addr string, now func() int64) (liveSample, bool) {
	s := liveSample{call: now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return s, false
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return s, false
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return s, false
	}
	found := 0
	for line := range strings.Lines(string(body)) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		switch name {
		case "flowstate_unanswered_reports":
			s.unanswered = f
		case "flowstate_oldest_unanswered_report_seconds":
			s.oldest = time.Duration(f * float64(time.Second))
		default:
			continue
		}
		found++
	}
	return s, found == 2
}

// serverName matches a server in a fault's action (s0, nats-server s1) or
// the stream that every server holds.
var serverName = regexp.MustCompile(`\bs\d+\b|nats-server|stream|every worker`)

// touched returns, for each worker, whether the event touches it: its
// process, its links or its clock, or a server (with JetStream every
// worker's store is on all of them), or the store's content. An event
// made of two faults (" WITH ", " AND ") touches what either does.
func touched(e event, names []string) []bool {
	out := make([]bool, len(names))
	for _, part := range regexp.MustCompile(` WITH | AND `).Split(e.action, -1) {
		var named []int
		for w, name := range names {
			if regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(part) {
				named = append(named, w)
			}
		}
		if len(named) == 0 || serverName.MatchString(part) {
			for w := range out {
				out[w] = true
			}
			continue
		}
		for _, w := range named {
			out[w] = true
		}
	}
	return out
}

// clockJump matches a jump of a worker's clock in a fault's action.
var clockJump = regexp.MustCompile(`jump the clock of (worker(?: \d+)?) by (-[0-9.a-zµ]+)`)

// delayedTimers returns how long a fault delays the timers of the worker
// named name after it ends: the chaos workers' clock (chaosclock) fires
// its timers by its own reading, so a jump back delays every timer set
// before it (the state's ticks, which answer the reports whose writes
// timed out, among them) by the jump. The real clock's timers run on the
// monotonic clock, which does not jump.
func delayedTimers(action, name string) time.Duration {
	for _, m := range clockJump.FindAllStringSubmatch(action, -1) {
		if m[1] != name {
			continue
		}
		if d, err := time.ParseDuration(m[2]); err == nil {
			return -d
		}
	}
	return 0
}

// livenessSlack widens the span in which a fault excuses a late answer:
// the worker measures the age on its clock, the history on the test's.
const livenessSlack = time.Second

// deafWorkers checks that every report a worker took was answered within
// answerBound of its taking, or of the end of the last fault that touched
// the worker while it waited: once the last such fault has healed, every
// report the worker takes is answered within the bound, and those it took
// before are answered too (the worker answers each report within its
// apply timeout whatever the store does). A sample is the fact: a worker
// whose oldest unanswered report (answers go in the order reports were
// taken, so every later one waits too) breaks that is deaf, and the run
// fails naming it, when it took the report, and the clients' reports sent
// then that were not answered: the candidates, since the queue group does
// not say which worker a report went to.
func deafWorkers(names []string, samples [][]liveSample, evs []event, ops []op) []string {
	var touches [][]bool
	for _, e := range evs {
		touches = append(touches, touched(e, names))
	}
	var problems []string
	for w, ss := range samples {
		for _, s := range ss {
			if s.oldest <= answerBound {
				continue
			}
			taken := s.call - int64(s.oldest)
			// The last fault touching w in force while the report waited.
			var healed int64
			found := false
			for i, e := range evs {
				end := e.end + int64(delayedTimers(e.action, names[w]))
				if touches[i][w] && e.start <= s.call && end >= taken-int64(livenessSlack) {
					healed, found = max(healed, end), true
				}
			}
			switch {
			case !found:
				problems = append(problems, deafProblem(names[w], s, taken, "with no fault touching it meanwhile", ops))
			case s.call-healed > int64(answerBound):
				problems = append(problems, deafProblem(names[w], s, taken,
					fmt.Sprintf("%v after the last fault touching it ended (at %v)", ms(s.call-healed), ms(healed)), ops))
			default:
				continue
			}
			break
		}
	}
	return problems
}

// deafProblem describes the report taken at taken, still unanswered at s.
func deafProblem(name string, s liveSample, taken int64, why string, ops []op) string {
	var unanswered []string
	for _, o := range ops {
		if o.in.kind == opReport && o.out.status == stUnknown && o.call >= taken-int64(livenessSlack) && o.call <= taken+int64(livenessSlack) && len(unanswered) < 3 {
			unanswered = append(unanswered, fmt.Sprintf("client %d's %s, sent at %v", o.client, describeOp(o.in, o.out), ms(o.call)))
		}
	}
	which := "no client's report sent then failed"
	if len(unanswered) > 0 {
		which = "the reports sent then that were not answered include " + strings.Join(unanswered, "; ")
	}
	return fmt.Sprintf("%s is deaf: a report it took at %v was still unanswered at %v (%.0f unanswered), %s; %s",
		name, ms(taken), ms(s.call), s.unanswered, why, which)
}
