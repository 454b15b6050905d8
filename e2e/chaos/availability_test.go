package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestPartitionAvailability is an experiment, not a check: for each
// partition that CHAOS_AVAILABILITY names (a comma-separated list of
// availabilityFaults' names, or all), on a fresh JetStream system, it
// sends reports through the workers and, beside them, puts of its own to
// the bucket with a bare JetStream client that reaches the servers through
// proxies as a worker does (each put waits 2 s, as a worker's), and logs
// when each got acks: during the fault, the first after the heal, and the
// longest time without one. What the bare client gets is JetStream's own
// availability; the difference is what the worker adds. Skipped unless
// CHAOS_AVAILABILITY is set.
func TestPartitionAvailability(t *testing.T) {
	env := os.Getenv("CHAOS_AVAILABILITY")
	if env == "" {
		t.Skip("set CHAOS_AVAILABILITY to all, or to some of: " + strings.Join(availabilityNames(), ","))
	}
	names := availabilityNames()
	if env != "all" {
		names = strings.Split(env, ",")
	}
	rounds := 1
	if r := os.Getenv("CHAOS_AVAILABILITY_ROUNDS"); r != "" {
		_, err := fmt.Sscan(r, &rounds)
		require.NoError(t, err, "CHAOS_AVAILABILITY_ROUNDS")
	}
	for _, name := range names {
		f, ok := availabilityFaults[name]
		require.True(t, ok, "no partition %q: want some of %v", name, availabilityNames())
		for round := range rounds {
			t.Run(fmt.Sprintf("%s/%d", name, round), func(t *testing.T) { measureAvailability(t, name, f) })
		}
	}
}

// cutPlan breaks some routes of the cluster (leader: the bucket
// stream's leader's index) and returns how to heal them; hold is how long
// it lasts.
type cutPlan struct {
	hold  time.Duration
	apply func(s *system, leader int) (heal func())
}

var availabilityFaults = map[string]cutPlan{
	"leader-stall":   {8 * time.Second, isolate(true, true)},
	"leader-cut":     {8 * time.Second, isolate(true, false)},
	"follower-stall": {8 * time.Second, isolate(false, true)},
	"follower-cut":   {8 * time.Second, isolate(false, false)},
	"flap-stall":     {20 * time.Second, flap(true)},
	"flap-cut":       {20 * time.Second, flap(false)},
	"leader-sends":   {8 * time.Second, leaderSends},
}

func availabilityNames() []string {
	var out []string
	for k := range availabilityFaults {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// isolate stalls or cuts every route of the leader, or of another server.
func isolate(leader, stall bool) func(*system, int) func() {
	return func(s *system, l int) func() {
		i := l
		if !leader {
			i = (l + 1) % len(s.servers)
		}
		links := routeLinks(s, i)
		for _, r := range links {
			if stall {
				r.Stall()
			} else {
				r.Cut()
			}
		}
		return func() {
			for _, r := range links {
				r.Heal()
			}
		}
	}
}

// flap breaks the leader's routes for a second and heals them for a
// second, until healed.
func flap(stall bool) func(*system, int) func() {
	return func(s *system, l int) func() {
		links := routeLinks(s, l)
		stop, done := make(chan struct{}), make(chan struct{})
		go flapLinks(links, stall, stop, done)
		return func() {
			close(stop)
			<-done
			for _, r := range links {
				r.Heal()
			}
		}
	}
}

// leaderSends holds what the leader sends on its routes.
func leaderSends(s *system, l int) func() {
	links := routeLinks(s, l)
	for j := range s.servers {
		if j != l {
			s.cluster.Route(l, j).Block(l)
		}
	}
	return func() {
		for _, r := range links {
			r.Heal()
		}
	}
}

// ackLog records when acks came, and how many failures.
type ackLog struct {
	mu     sync.Mutex
	acks   []int64
	failed int
	why    map[string]int
}

func (a *ackLog) add(t int64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		a.acks = append(a.acks, t)
		return
	}
	a.failed++
	if a.why == nil {
		a.why = map[string]int{}
	}
	msg := err.Error()
	if len(msg) > 60 {
		msg = msg[:60]
	}
	a.why[msg]++
}

// summary describes the acks from start to end, with heal in between.
func (a *ackLog) summary(start, heal, end int64) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	acks := slices.Clone(a.acks)
	slices.Sort(acks)
	during, first := 0, int64(-1)
	gap, last := int64(0), start
	for _, t := range acks {
		if t < start || t > end {
			continue
		}
		if t <= heal {
			during++
		} else if first < 0 {
			first = t - heal
		}
		gap = max(gap, t-last)
		last = t
	}
	gap = max(gap, end-last)
	rec := "none"
	if first >= 0 {
		rec = ms(first).String()
	}
	var why []string
	for w, n := range a.why {
		why = append(why, fmt.Sprintf("%d %q", n, w))
	}
	slices.Sort(why)
	if len(why) > 4 {
		why = why[:4]
	}
	return fmt.Sprintf("acks during %d, first after the heal %s, longest without %v; failures %d %v", during, rec, ms(gap), a.failed, why)
}

// measureAvailability runs one partition on a fresh system and logs the
// acks of the workers' reports and of the bare client's puts.
func measureAvailability(t *testing.T, name string, p cutPlan) {
	h := newHistory()
	cfg := systemConfig{diskServer: -1}
	debug := os.Getenv("CHAOS_AVAILABILITY_DEBUG") != ""
	if debug {
		cfg.workerArgs = []string{"--log-level", "debug"}
	}
	s := startJetStreamSystem(t, h.now, cfg)
	if debug {
		defer func() {
			for _, w := range s.workers {
				t.Logf("%s:\n%s", w.name, w.Output())
			}
		}()
	}
	nc, err := s.connect("availability")
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, (&nemesis{js: js}).awaitStream())

	var urls []string
	for i := range s.servers {
		px, err := s.cluster.ClientProxy(i)
		require.NoError(t, err)
		urls = append(urls, "nats://"+px.Addr())
	}
	bare, err := nats.Connect(strings.Join(urls, ","), nats.Name("bare JetStream client"), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	require.NoError(t, err)
	defer bare.Close()
	bjs, err := jetstream.New(bare)
	require.NoError(t, err)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var workers, direct ackLog
	for c := range 8 {
		cnc, err := s.connect(fmt.Sprintf("reports %d", c))
		require.NoError(t, err)
		defer cnc.Close()
		wg.Go(func() {
			for k := 1; ctx.Err() == nil; k++ {
				msg, err := cnc.Request(subjects.Heartbeat(uint64(c+1)), seqReport(uint64(c+1), k), 4*time.Second)
				if out := result(input{kind: opReport}, msg, err); out.status != stOK {
					err = fmt.Errorf("%s", out.code)
				}
				workers.add(h.now(), err)
				pause(ctx, 20*time.Millisecond)
			}
		})
		wg.Go(func() {
			for k := 1; ctx.Err() == nil; k++ {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := bjs.Publish(pctx, fmt.Sprintf("$KV.%s.bare/%d", bucket, c), []byte(fmt.Sprint(k)))
				cancel()
				if ctx.Err() == nil {
					direct.add(h.now(), err)
				}
				pause(ctx, 20*time.Millisecond)
			}
		})
	}
	pause(context.Background(), 3*time.Second)
	leader := streamLeader(js)
	require.GreaterOrEqual(t, leader, 0)
	start := h.now()
	heal := p.apply(s, leader)
	pause(context.Background(), p.hold)
	heal()
	healed := h.now()
	pause(context.Background(), 15*time.Second)
	end := h.now()
	stop()
	wg.Wait()
	t.Logf("%s (s%d led the stream, held %v): workers: %s", name, leader, p.hold, workers.summary(start, healed, end))
	t.Logf("%s (s%d led the stream, held %v): bare JetStream: %s", name, leader, p.hold, direct.summary(start, healed, end))
	t.Logf("%s: the stream's leader after: s%d", name, streamLeader(js))
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
