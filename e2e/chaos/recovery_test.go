package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// updateLog records when state updates (flow.state, flow.state.delta)
// arrive at a subscriber of its own.
type updateLog struct {
	mu    sync.Mutex // guards times
	times []int64
}

// watchUpdates subscribes nc to both kinds of update.
func watchUpdates(nc *nats.Conn, now func() int64) (*updateLog, error) {
	u := &updateLog{}
	for _, subj := range []string{subjects.State, subjects.Delta} {
		if _, err := nc.Subscribe(subj, func(*nats.Msg) {
			t := now()
			u.mu.Lock()
			u.times = append(u.times, t)
			u.mu.Unlock()
		}); err != nil {
			return nil, err
		}
	}
	return u, nil
}

func (u *updateLog) snapshot() []int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := slices.Clone(u.times)
	slices.Sort(out)
	return out
}

// The measures of a recovery, from a fault's heal.
const (
	recAck    = iota // the first acked report
	recGet           // the first fresh get
	recUpdate        // the first state update
	nMeasures
)

var measureNames = [nMeasures]string{"ack", "fresh get", "flow.state"}

// recovery is how long after one fault's heal each measure came; never[m]
// if it did not before the next fault started or the run ended (its time
// is then until that moment).
type recovery struct {
	kind  string
	took  [nMeasures]time.Duration
	never [nMeasures]bool
}

// recoveries measures every fault's recovery from the history (fresh
// operations only: stale gets do not count), the nemesis's own writes
// left out, and the updates' arrival times.
func recoveries(evs []event, fresh []op, updates []int64, nemesisID int, end int64) []recovery {
	var times [nMeasures][]int64
	for _, o := range fresh {
		switch {
		case o.client == nemesisID || o.out.status != stOK:
		case o.in.kind == opReport:
			times[recAck] = append(times[recAck], o.ret)
		case o.in.kind == opGet:
			times[recGet] = append(times[recGet], o.ret)
		}
	}
	times[recUpdate] = updates
	for m := range times {
		slices.Sort(times[m])
	}
	var out []recovery
	for k, e := range evs {
		limit := end
		if k+1 < len(evs) {
			limit = max(e.heal, evs[k+1].start)
		}
		r := recovery{kind: e.kind}
		for m := range times {
			i := sort.Search(len(times[m]), func(i int) bool { return times[m][i] >= e.heal })
			if i == len(times[m]) || times[m][i] > limit {
				r.never[m], r.took[m] = true, time.Duration(limit-e.heal)
				continue
			}
			r.took[m] = time.Duration(times[m][i] - e.heal)
		}
		out = append(out, r)
	}
	return out
}

// recoveryStats is the p50, p99 and max of one measure of one kind.
type recoveryStats struct {
	n             int
	p50, p99, max time.Duration
	never         int
}

func statsOf(ds []time.Duration, never int) recoveryStats {
	slices.Sort(ds)
	at := func(p int) time.Duration { return ds[(len(ds)-1)*p/100] }
	return recoveryStats{n: len(ds), p50: at(50), p99: at(99), max: ds[len(ds)-1], never: never}
}

// summarize returns, per kind (sorted) and measure, the statistics, and
// the worst recovery of all with its kind and measure.
func summarize(rs []recovery) (lines []string, worst string, worstTook time.Duration) {
	byKind := map[string][]recovery{}
	for _, r := range rs {
		byKind[r.kind] = append(byKind[r.kind], r)
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		var parts []string
		for m := range nMeasures {
			var ds []time.Duration
			never := 0
			for _, r := range byKind[k] {
				ds = append(ds, r.took[m])
				if r.never[m] {
					never++
				}
			}
			st := statsOf(ds, never)
			s := fmt.Sprintf("%s p50 %v p99 %v max %v", measureNames[m], ms(int64(st.p50)), ms(int64(st.p99)), ms(int64(st.max)))
			if never > 0 {
				s += fmt.Sprintf(" (%d not before the next fault)", never)
			}
			parts = append(parts, s)
			if st.max > worstTook {
				worstTook, worst = st.max, fmt.Sprintf("%v (%s, %s)", ms(int64(st.max)), k, measureNames[m])
			}
		}
		lines = append(lines, fmt.Sprintf("%s (%d): %s", k, len(byKind[k]), strings.Join(parts, "; ")))
	}
	if worst == "" {
		worst = "none"
	}
	return lines, worst, worstTook
}

// countKinds returns "kind n, kind n" for the events.
func countKinds(evs []event) string {
	n := map[string]int{}
	for _, e := range evs {
		n[e.kind]++
	}
	kinds := make([]string, 0, len(n))
	for k := range n {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
	}
	return strings.Join(parts, ", ")
}

// details returns, per event, what the clients were answered from its
// start to its heal, and how long after the heal each measure recovered.
func (r *runResult) details(ops []op) []string {
	out := make([]string, len(r.events))
	for i, e := range r.events {
		type tally struct{ ok, rejected, stale, unavailable, timeout int }
		var reports, gets tally
		for _, o := range ops {
			if o.call < e.start || o.call > e.heal || o.in.kind == opInvalid || o.client == r.nemesisID {
				continue
			}
			t := &reports
			if o.in.kind == opGet {
				t = &gets
			}
			switch {
			case o.out.status == stOK:
				t.ok++
			case o.out.status == stRejected:
				t.rejected++
			case o.out.status == stStale:
				t.stale++
			case o.out.code == "503":
				t.unavailable++
			default:
				t.timeout++
			}
		}
		s := fmt.Sprintf("meanwhile reports %d acked, %d 503, %d 409, %d failed otherwise; gets %d answered, %d 503, %d failed otherwise",
			reports.ok, reports.unavailable, reports.stale, reports.timeout+reports.rejected, gets.ok, gets.unavailable, gets.timeout+gets.rejected)
		if i < len(r.recoveries) {
			rec := r.recoveries[i]
			s += "; after the heal"
			for m := range nMeasures {
				never := ""
				if rec.never[m] {
					never = " (not before the next fault)"
				}
				s += fmt.Sprintf(" %s %v%s", measureNames[m], ms(int64(rec.took[m])), never)
			}
		}
		out[i] = s
	}
	return out
}
