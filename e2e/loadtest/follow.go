package main

// The follow scenarios measure the frontend target: the CPU and the bytes
// per second of a client.Watch that follows deltas (v2) against one that
// follows the full updates on <prefix>.state (v1), both at once against the
// same worker and the same reports: 10 nodes reporting per 100 ms, with
// 1,000 flows (100 nodes x 10) and 10,000 flows (1,000 nodes x 10). Each
// follower is a child process (this program, re-run as `loadtest
// follow-child MODE URL`), so that its CPU is its own: utime+stime from
// its getrusage (microseconds, where /proc counts 10 ms ticks), and bytes
// received from its connection's statistics.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/protocol"
)

// followChildArg is the first argument of a follower child.
const followChildArg = "follow-child"

var followScenarios = []scenario{
	{name: "follow-1k", kind: kindFollow, nodes: 100, flows: 10},
	{name: "follow-10k", kind: kindFollow, nodes: 1000, flows: 10},
}

// followSample is what a follower child says when asked: its connection's
// bytes and messages received, the requests it sent (each a snapshot: a
// watch sends nothing else), the states its Watch yielded, the revision of
// the last one, and its CPU time.
type followSample struct {
	inBytes, inMsgs, snapshots, states, revision uint64
	cpu                                          time.Duration
}

func (s followSample) sub(b followSample) followSample {
	return followSample{inBytes: s.inBytes - b.inBytes, inMsgs: s.inMsgs - b.inMsgs, snapshots: s.snapshots - b.snapshots,
		states: s.states - b.states, revision: s.revision, cpu: s.cpu - b.cpu}
}

// followerStats is one follower's share of a run.
type followerStats struct {
	followSample
	elapsed time.Duration
}

func (f followerStats) cpuShare() float64    { return f.cpu.Seconds() / f.elapsed.Seconds() }
func (f followerStats) bytesPerSec() float64 { return float64(f.inBytes) / f.elapsed.Seconds() }

// followResult is one run of a follow scenario.
type followResult struct {
	v1, v2 followerStats
	check  aggCheck
}

// runFollowChild is a follower child: it follows the state with Watch in
// mode (v1 or v2) on url, and answers each line on stdin with a sample on
// stdout, until stdin closes.
func runFollowChild(args []string, stdin io.Reader, stdout io.Writer) int {
	if len(args) != 2 || (args[0] != "v1" && args[0] != "v2") {
		fmt.Fprintln(os.Stderr, "usage: loadtest follow-child v1|v2 NATS_URL")
		return 2
	}
	mode := client.WatchV2
	if args[0] == "v1" {
		mode = client.WatchV1
	}
	nc, err := nats.Connect(args[1], nats.Name("loadtest-follow-"+args[0]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	cl, err := client.New(nc, client.Options{Prefix: prefix, Timeout: requestTimeout, WatchMode: mode, MaxFlows: math.MaxInt, MaxGetBytes: math.MaxInt}) // its own worker, of any size
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var states, revision atomic.Uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s, err := range cl.Watch(ctx) {
			if err != nil {
				continue // no worker yet: Watch retries
			}
			revision.Store(s.Revision)
			states.Add(1)
		}
	}()
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		st := nc.Stats()
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		fmt.Fprintf(stdout, "%d %d %d %d %d %d\n", st.InBytes, st.InMsgs, st.OutMsgs, states.Load(), revision.Load(), cpu)
	}
	cancel()
	<-done
	return 0
}

// follower is a running follower child.
type follower struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	done chan struct{}
}

func startFollower(mode, url string) (*follower, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, followChildArg, mode, url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the %s follower: %w", mode, err)
	}
	f := &follower{cmd: cmd, in: in, out: bufio.NewScanner(out), done: make(chan struct{})}
	return f, nil
}

// sample asks the child for its counts and reads its CPU time.
func (f *follower) sample() (followSample, error) {
	var s followSample
	if _, err := io.WriteString(f.in, "sample\n"); err != nil {
		return s, fmt.Errorf("follower: %w", err)
	}
	if !f.out.Scan() {
		return s, fmt.Errorf("follower exited: %v", f.out.Err())
	}
	if _, err := fmt.Sscan(f.out.Text(), &s.inBytes, &s.inMsgs, &s.snapshots, &s.states, &s.revision, &s.cpu); err != nil {
		return s, fmt.Errorf("follower said %q: %w", f.out.Text(), err)
	}
	return s, nil
}

// stop closes the child's stdin, which ends it, and waits up to
// stopTimeout before killing it.
func (f *follower) stop() error {
	_ = f.in.Close()
	go func() {
		_ = f.cmd.Wait()
		close(f.done)
	}()
	select {
	case <-f.done:
		return nil
	case <-time.After(stopTimeout):
		_ = f.cmd.Process.Kill()
		<-f.done
		return errors.New("a follower did not exit when its stdin closed; killed")
	}
}

// awaitRevision samples the followers until each has yielded revision rev
// or more, for up to startTimeout.
func awaitRevision(ctx context.Context, rev uint64, fs ...*follower) error {
	deadline := time.Now().Add(startTimeout)
	for {
		behind := 0
		for _, f := range fs {
			s, err := f.sample()
			if err != nil {
				return err
			}
			if s.revision < rev {
				behind++
			}
		}
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d follower(s) not at revision %d within %v", behind, rev, startTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// awaitDelta waits up to startTimeout for a delta of revision rev or more
// on sub.
func awaitDelta(sub *nats.Subscription, rev uint64) error {
	deadline := time.Now().Add(startTimeout)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return fmt.Errorf("no delta of revision %d: %w", rev, err)
		}
		if r, ok := revision(m, protocol.HeaderRevision); ok && r >= rev {
			return nil
		}
	}
}

// measureFollow warms the worker up, starts a v1 and a v2 follower, waits
// until both hold the warm state, then sends acknowledged reports at
// deltaRate for d while sampling both, and checks that both end on the
// final revision and that the aggregate is exact.
func measureFollow(ctx context.Context, url string, sc scenario, d time.Duration) (r followResult, err error) {
	nc, err := connect(url, "loadtest-follow")
	if err != nil {
		return r, err
	}
	defer nc.Close()
	g, err := loadgen.New(nc, loadgen.Config{Nodes: sc.nodes, Flows: sc.flows, Rate: deltaRate, Duration: d, Timeout: requestTimeout})
	if err != nil {
		return r, err
	}
	deltas, err := nc.SubscribeSync(protocol.SubjectsOf(prefix).Delta)
	if err != nil {
		return r, err
	}
	defer func() { _ = deltas.Unsubscribe() }()
	if err := g.WarmUp(ctx); err != nil {
		return r, err
	}
	cl, err := client.New(nc, client.Options{Prefix: prefix, Timeout: requestTimeout, MaxFlows: math.MaxInt, MaxGetBytes: math.MaxInt}) // its own worker, of any size
	if err != nil {
		return r, err
	}
	// The warm-up changed every flow: its last delta is a resync, which
	// would make the v2 follower take a snapshot during the measurement if
	// it came after the follower's first snapshot.
	st, err := cl.Get(ctx)
	if err != nil {
		return r, err
	}
	if err := awaitDelta(deltas, st.Revision); err != nil {
		return r, err
	}
	fs := make([]*follower, 0, 2)
	defer func() {
		for _, f := range fs {
			err = errors.Join(err, f.stop())
		}
	}()
	for _, mode := range []string{"v1", "v2"} {
		f, err := startFollower(mode, url)
		if err != nil {
			return r, err
		}
		fs = append(fs, f)
	}
	if err := awaitRevision(ctx, st.Revision, fs...); err != nil {
		return r, err
	}
	var before [2]followSample
	for i, f := range fs {
		if before[i], err = f.sample(); err != nil {
			return r, err
		}
	}
	start := time.Now()
	res := g.Run(ctx)
	if res.FirstError != nil {
		return r, res.FirstError
	}
	elapsed := time.Since(start)
	stats := make([]followerStats, 2)
	for i, f := range fs {
		after, err := f.sample()
		if err != nil {
			return r, err
		}
		stats[i] = followerStats{followSample: after.sub(before[i]), elapsed: elapsed}
	}
	r.v1, r.v2 = stats[0], stats[1]
	// Both end on the final state: the updates of the last reports follow
	// within a publish interval.
	if st, err = cl.Get(ctx); err != nil {
		return r, err
	}
	if err := awaitRevision(ctx, st.Revision, fs...); err != nil {
		return r, err
	}
	r.check, err = checkAggregate(ctx, g, 0)
	return r, err
}

// String is a run's line in the progress log.
func (r followResult) String() string {
	f := func(s followerStats) string {
		return fmt.Sprintf("CPU %.2f%% of a core, %s/s received (%d msgs, %d states, %d snapshots)",
			100*s.cpuShare(), kb(s.bytesPerSec()), s.inMsgs, s.states, s.snapshots)
	}
	return fmt.Sprintf("v2 (deltas) %s; v1 (flow.state) %s; aggregate %s", f(r.v2), f(r.v1), r.check)
}

func kb(b float64) string {
	if b >= 1<<20 {
		return fmt.Sprintf("%.2f MB", b/(1<<20))
	}
	return fmt.Sprintf("%.1f KB", b/(1<<10))
}

// followTargets is the frontend target, for the follow scenarios
// that ran: following deltas costs less CPU and fewer bytes than following
// flow.state, in the same run.
func followTargets(find func(string) []runResult) []target {
	var out []target
	for _, sc := range followScenarios {
		runs := find(sc.name)
		if len(runs) == 0 {
			continue
		}
		t := target{name: fmt.Sprintf("a frontend following deltas at %s flows: CPU and bytes/s vs flow.state", count(float64(sc.nodes*sc.flows)))}
		var cpu, bytes, cpu1, cpu2, b1, b2 []float64
		for _, r := range runs {
			if r.follow == nil {
				continue
			}
			cpu = append(cpu, r.follow.v2.cpuShare()/r.follow.v1.cpuShare())
			bytes = append(bytes, r.follow.v2.bytesPerSec()/r.follow.v1.bytesPerSec())
			cpu1, cpu2 = append(cpu1, r.follow.v1.cpuShare()), append(cpu2, r.follow.v2.cpuShare())
			b1, b2 = append(b1, r.follow.v1.bytesPerSec()), append(b2, r.follow.v2.bytesPerSec())
		}
		if len(cpu) == 0 {
			continue
		}
		c, b := spreadOf(cpu), spreadOf(bytes)
		t.verdict = "missed"
		if c.max < 1 && b.max < 1 {
			t.verdict = "met"
		}
		t.detail = fmt.Sprintf("CPU %.2f%% vs %.2f%% of a core (%.2fx), %s/s vs %s/s received (%.4fx)",
			100*spreadOf(cpu2).med, 100*spreadOf(cpu1).med, c.med, kb(spreadOf(b2).med), kb(spreadOf(b1).med), b.med)
		out = append(out, t)
	}
	return out
}

// isFollowChild reports whether args make this program a follower child.
func isFollowChild(args []string) bool {
	return len(args) > 0 && strings.EqualFold(args[0], followChildArg)
}
