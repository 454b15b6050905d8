package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flowstate-io/flowstate/internal/latency"
)

// column is one column of the summary: a metric of a run, NaN when the run
// does not measure it.
type column struct {
	head   string
	metric func(runResult) float64
	format func(float64) string
}

var nan = math.NaN()

// The metrics of the summary.
var (
	rawRate = func(r runResult) float64 {
		if r.raw == nil {
			return nan
		}
		return r.raw.rate()
	}
	appliedRate = func(r runResult) float64 {
		if r.acked != nil {
			return r.acked.res.Rate()
		}
		return ingestMetric(ingestResult.rate)(r)
	}
	appliedOfRaw = func(r runResult) float64 {
		if r.raw == nil || r.ingest == nil {
			return nan
		}
		return r.ingest.rate() / r.raw.rate()
	}
	droppedShare = ingestMetric(func(r ingestResult) float64 {
		return 100 * float64(r.counts.dropped) / float64(r.counts.applied+r.counts.dropped)
	})
	ackP50 = quantile(ackSummary, func(s latency.Summary) time.Duration { return s.P50 })
	ackP99 = quantile(ackSummary, func(s latency.Summary) time.Duration { return s.P99 })
	getP50 = quantile(getSummary, func(s latency.Summary) time.Duration { return s.P50 })
	getP99 = quantile(getSummary, func(s latency.Summary) time.Duration { return s.P99 })
	exact  = func(r runResult) float64 {
		c := r.check()
		switch {
		case c == nil || !c.checked:
			return nan
		case c.exact:
			return 1
		}
		return 0
	}
	workerCPU = ingestMetric(func(r ingestResult) float64 { return 100 * r.cpu.Seconds() / r.elapsed.Seconds() })
	others    = ingestMetric(func(r ingestResult) float64 { return 100 * r.usage.othersShare() })
	rss       = func(r runResult) float64 { return memMetric(r, func(m memory) uint64 { return m.rss }) }
	peak      = func(r runResult) float64 { return memMetric(r, func(m memory) uint64 { return m.peak }) }
)

var columns = []column{
	{"raw msgs/s", rawRate, count},
	{"applied/s", appliedRate, count},
	{"applied/raw", appliedOfRaw, func(x float64) string { return fmt.Sprintf("%.2f", x) }},
	{"dropped", droppedShare, pct},
	{"CPU µs/rep", cpuPerReport, func(x float64) string { return fmt.Sprintf("%.2f", x) }},
	{"worker CPU", workerCPU, pct},
	{"others", others, pct},
	{"ack p50", ackP50, durF},
	{"ack p99", ackP99, durF},
	{"get p50", getP50, durF},
	{"get p99", getP99, durF},
	{"RSS MB", rss, mbF},
	{"peak RSS MB", peak, mbF},
	{"exact", exact, yesNo},
}

// cpuPerReport is the workers' CPU per applied report, or per acked report
// in an acked scenario.
func cpuPerReport(r runResult) float64 {
	if r.acked != nil {
		return r.acked.cpuPerAck()
	}
	return ingestMetric(ingestResult.cpuPerReport)(r)
}

func ingestMetric(f func(ingestResult) float64) func(runResult) float64 {
	return func(r runResult) float64 {
		if r.ingest == nil {
			return nan
		}
		return f(*r.ingest)
	}
}

// ackSummary is the ack latency of a run; ok false if it has none.
func ackSummary(r runResult) (latency.Summary, bool) {
	switch {
	case r.acked != nil:
		return r.acked.res.Latency, true
	case r.ingest != nil:
		return r.ingest.acks.Latency, true
	case r.fanout != nil:
		return r.fanout.res.Latency, true
	}
	return latency.Summary{}, false
}

// getSummary is the get latency of a run; ok false if it has none.
func getSummary(r runResult) (latency.Summary, bool) {
	if r.ingest == nil {
		return latency.Summary{}, false
	}
	return r.ingest.side.get.Summary(), true
}

// quantile is a quantile of a run's latencies, in seconds.
func quantile(which func(runResult) (latency.Summary, bool), q func(latency.Summary) time.Duration) func(runResult) float64 {
	return func(r runResult) float64 {
		s, ok := which(r)
		if !ok || s.Count == 0 {
			return nan
		}
		return q(s).Seconds()
	}
}

func memMetric(r runResult, f func(memory) uint64) float64 {
	switch {
	case r.hold != nil:
		return float64(f(r.hold.mem))
	case r.ingest != nil:
		return float64(f(r.ingest.mem))
	}
	return nan
}

// printSummary prints the table, each scenario as its medians over the runs
// and a line of ranges (min..max), then the target verdicts.
func printSummary(w io.Writer, cfg config, natsVersion string, results []scenarioResult, total time.Duration) {
	fmt.Fprintf(w, "\nflowstate load test: %s, %d CPUs (%s), %s, nats-server %s\n",
		runtime.Version(), runtime.NumCPU(), cpuModel(), runtime.GOOS+"/"+runtime.GOARCH, natsVersion)
	fmt.Fprintf(w, "%d run(s) of %s per measurement, interleaved round by round, %d ack clients; each scenario: median, then min..max over the runs; a ratio between two scenarios: median and range of the ratios of their runs in the same round\n\n",
		cfg.runs, cfg.duration, cfg.ackClients)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	heads := []string{"scenario"}
	for _, c := range columns {
		heads = append(heads, c.head)
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t")+"\t")
	for _, res := range results {
		if len(res.runs) == 0 {
			continue
		}
		med, rng := []string{res.scenario.label(cfg)}, []string{"  (min..max)"}
		for _, c := range columns {
			s := over(res.runs, c.metric)
			if s.n == 0 {
				med, rng = append(med, "-"), append(rng, "")
				continue
			}
			med = append(med, c.format(s.med))
			rng = append(rng, c.format(s.min)+".."+c.format(s.max))
		}
		fmt.Fprintln(tw, strings.Join(med, "\t")+"\t")
		if len(res.runs) > 1 {
			fmt.Fprintln(tw, strings.Join(rng, "\t")+"\t")
		}
	}
	tw.Flush()
	fmt.Fprintln(w, `
raw: a counting queue subscriber, no worker. applied: reports the worker applied (its /metrics) per second,
from the first publish to the ack of a report sent after the last one. dropped: share of the reports that
reached the worker's connection and were dropped as a slow consumer. CPU: the worker's utime+stime per applied
report (acked scenarios: of every worker, per acked report); worker CPU: that CPU time over the elapsed time
(100% = one core); others: the share of the machine's
CPU that other processes used meanwhile (noise). ack: reports sent as requests during the ingest (under a
flood, the backlog's queueing time).
RSS: VmRSS at the end of the run; peak: VmHWM. MB = 2^20 bytes. exact: the final aggregate is each node's
last acknowledged report (-: not checked, as reports were dropped or the get was refused).`)
	fmt.Fprintln(w, "\ntargets")
	for _, t := range checkTargets(cfg, results) {
		fmt.Fprintf(w, "  %-9s %s: %s\n", "["+t.verdict+"]", t.name, t.detail)
	}
	fmt.Fprintf(w, "\ntotal time %s\n", total.Round(time.Second))
}

// target is one performance target and its verdict.
type target struct {
	name    string
	verdict string // met, missed, or "not run"
	detail  string
}

func checkTargets(cfg config, results []scenarioResult) []target {
	find := func(name string) []runResult {
		for _, r := range results {
			if r.scenario.name == name {
				return r.runs
			}
		}
		return nil
	}
	applied := appliedRate
	var out []target

	t := target{name: "applied >= 0.8x raw at 1000x10"}
	if runs := find("1000x10"); len(runs) > 0 {
		ratio := over(runs, appliedOfRaw)
		t.verdict = verdict(ratio.med >= 0.8, ratio, 0.8)
		t.detail = fmt.Sprintf("%.2fx (%.2f..%.2f): %s/s applied vs %s/s raw", ratio.med, ratio.min, ratio.max,
			count(over(runs, applied).med), count(over(runs, rawRate).med))
	}
	out = append(out, t)

	// NATS itself slows down with the number of subjects, so the detail
	// gives raw's own ratio beside the worker's: the ceiling of this one.
	t = target{name: "applied rate at 10000x10 >= 0.9x at 100x10"}
	if big, small := find("10000x10"), find("100x10"); len(big) > 0 && len(small) > 0 {
		b, s := over(big, applied), over(small, applied)
		ratio := pairedRatio(big, small, applied)
		t.verdict = verdict(ratio.med >= 0.9, ratio, 0.9)
		cpu := ingestMetric(ingestResult.cpuPerReport)
		bc, sc := over(big, cpu), over(small, cpu)
		raw := pairedRatio(big, small, rawRate)
		t.detail = fmt.Sprintf("%.2fx (%.2f..%.2f): %s/s vs %s/s; raw NATS %.2fx (%.2f..%.2f): %s/s vs %s/s; by CPU per report, %.2f vs %.2f µs = %.2fx",
			ratio.med, ratio.min, ratio.max, count(b.med), count(s.med), raw.med, raw.min, raw.max,
			count(over(big, rawRate).med), count(over(small, rawRate).med), bc.med, sc.med, sc.med/bc.med)
	}
	out = append(out, t)

	t = target{name: fmt.Sprintf("get p99 < 5 ms at ~%s reports/s with 10,000 flows", count(cfg.getLoadRate))}
	if runs := find("get"); len(runs) > 0 {
		p99 := over(runs, getP99)
		rate := over(runs, applied)
		reached := rate.med >= 0.9*cfg.getLoadRate
		t.verdict = verdict(p99.med < 0.005 && reached, p99, 0.005)
		t.detail = fmt.Sprintf("p99 %s (%s..%s), p50 %s, at %s/s applied (%s..%s), other processes using %.0f%% of the machine",
			durF(p99.med), durF(p99.min), durF(p99.max), durF(over(runs, getP50).med), count(rate.med), count(rate.min), count(rate.max),
			over(runs, others).med)
		if !reached {
			t.detail += "; the ingest did not reach 90% of the target rate"
		}
	}
	out = append(out, t)

	t = target{name: "RSS < 200 MB holding 10,000 nodes x 10 flows"}
	if runs := find("rss"); len(runs) > 0 {
		m := over(runs, rss)
		t.verdict = verdict(m.med < 200<<20, m, 200<<20)
		t.detail = fmt.Sprintf("VmRSS %s MB (%s..%s)", mbF(m.med), mbF(m.min), mbF(m.max))
	}
	out = append(out, t)
	out = append(out, ackedTargets(find)...)
	out = append(out, deltaTargets(find)...)
	out = append(out, followTargets(find)...)
	out = append(out, snapshotTargets(find)...)
	out = append(out, fanoutTargets(find)...)
	for i := range out {
		if out[i].verdict == "" {
			out[i].verdict, out[i].detail = "not run", "scenario not measured"
		}
	}
	return out
}

// verdict says met or missed, and borderline when the runs' range
// straddles the threshold.
func verdict(met bool, s spread, threshold float64) string {
	v := "missed"
	if met {
		v = "met"
	}
	if s.n > 1 && s.min < threshold && s.max >= threshold {
		v += "?"
	}
	return v
}

// count formats a count or a rate with 3 significant digits: 412k, 1.23M.
func count(x float64) string {
	switch {
	case x >= 1e6:
		return sig3(x/1e6) + "M"
	case x >= 1e3:
		return sig3(x/1e3) + "k"
	}
	return fmt.Sprintf("%.0f", x)
}

func sig3(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// dur formats a duration with 3 significant digits.
func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return sig3(d.Seconds()) + "s"
	case d >= time.Millisecond:
		return sig3(float64(d)/1e6) + "ms"
	}
	return sig3(float64(d)/1e3) + "µs"
}

func yesNo(x float64) string {
	if x == 1 {
		return "yes"
	}
	return "no"
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", x) }

func durF(seconds float64) string { return dur(time.Duration(seconds * 1e9)) }

func secs(d time.Duration) string { return d.Round(time.Millisecond).String() }

func mb(b uint64) string { return mbF(float64(b)) + " MB" }

func mbF(b float64) string { return fmt.Sprintf("%.0f", b/(1<<20)) }

// cpuModel returns the first model name of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
