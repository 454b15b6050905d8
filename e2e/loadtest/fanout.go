package main

// The fan-out scenarios measure what many slow frontends that follow the
// full updates cost the NATS server: fanoutSubscribers subscribers of
// <prefix>.state, each reading its socket at fanoutReadRate, while 10
// nodes report per 100 ms (acked requests) into a 10,000-flow aggregate
// (1,000 nodes x 10 flows). fanout runs the worker as it starts by
// default (a full update with every publish, ten a second); fanout-5s
// with --full-interval 5s. Each run has a nats-server of its own whose
// max_pending (what it holds for one slow client before it closes it as a
// slow consumer) is fanoutMaxPending, so that the subscribers cannot make
// it hold more than fanoutSubscribers times that. A run reports the
// server's RSS before the subscribers, its peak and at the end, the
// subscribers it closed, the bytes each received a second, and the ack
// latency of the reports. Not in --scenarios all: name them.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/internal/proctest"
	"github.com/flowstate-io/flowstate/protocol"
)

var fanoutScenarios = []scenario{
	{name: "fanout", kind: kindFanout, nodes: 1000, flows: 10},
	{name: "fanout-5s", kind: kindFanout, nodes: 1000, flows: 10, workerArgs: []string{"--full-interval", "5s"}},
}

// The fan-out load.
const (
	fanoutSubscribers = 300
	fanoutReadRate    = 256 << 10 // bytes a second each subscriber reads
	fanoutMaxPending  = 8 << 20   // the server's max_pending
	fanoutDuration    = 20 * time.Second
	fanoutReadTick    = 50 * time.Millisecond // a subscriber reads fanoutReadRate/20 bytes per tick
)

// fanoutResult is one run of a fan-out scenario.
type fanoutResult struct {
	before, after memory // the server's, before the subscribers and at the end (after.peak: VmHWM)
	cut           uint64 // subscribers the server closed as slow consumers
	perSub        float64
	res           loadgen.Result
	check         aggCheck
}

func (r fanoutResult) String() string {
	lat := r.res.Latency
	return fmt.Sprintf("nats-server VmRSS %s before, peak %s, %s at the end; %d of %d subscribers closed as slow consumers; %s/s received each; %s acked, ack p50 %s p99 %s max %s (%d failed); aggregate %s",
		mb(r.before.rss), mb(r.after.peak), mb(r.after.rss), r.cut, fanoutSubscribers, kb(r.perSub),
		count(float64(r.res.Acked)), dur(lat.P50), dur(lat.P99), dur(lat.Max), r.res.Failed, r.check)
}

// runFanout starts the scenario's server and worker, loads the aggregate,
// then sends acked reports at deltaRate for fanoutDuration under the slow
// subscribers.
func (lt *loadTest) runFanout(ctx context.Context, sc scenario) (r fanoutResult, err error) {
	dir, err := os.MkdirTemp("", "flowstate-loadtest-fanout-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	monitor, err := proctest.FreePort()
	if err != nil {
		return r, err
	}
	conf := dir + "/nats-server.conf"
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("max_pending: %d\nhttp: \"127.0.0.1:%d\"\n", fanoutMaxPending, monitor)), 0o600); err != nil {
		return r, err
	}
	srv, url, err := startNATS(lt.bins.NATSServer, "-c", conf)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, srv.stop(syscall.SIGTERM)) }()
	w, err := startWorker(ctx, lt.bins.Worker, url, append(workerLimitArgs(sc, 0), sc.workerArgs...)...)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, lt.stopWorker(w)) }()

	nc, err := connect(url, "loadtest-fanout")
	if err != nil {
		return r, err
	}
	defer nc.Close()
	g, err := loadgen.New(nc, loadgen.Config{Nodes: sc.nodes, Flows: sc.flows, Rate: deltaRate, Duration: fanoutDuration, Timeout: requestTimeout})
	if err != nil {
		return r, err
	}
	if err := g.WarmUp(ctx); err != nil {
		return r, err
	}
	if r.before, err = memStatus(srv.pid()); err != nil {
		return r, err
	}
	subs, err := dialSlowSubscribers(ctx, strings.TrimPrefix(url, "nats://"), protocol.SubjectsOf(prefix).State)
	defer subs.close()
	if err != nil {
		return r, err
	}
	start := time.Now()
	r.res = g.Run(ctx)
	elapsed := time.Since(start)
	if r.after, err = memStatus(srv.pid()); err != nil {
		return r, err
	}
	if r.cut, err = slowConsumers(ctx, monitor); err != nil {
		return r, err
	}
	r.perSub = float64(subs.read.Load()) / fanoutSubscribers / elapsed.Seconds()
	subs.close()
	if err := ctx.Err(); err != nil {
		return r, err
	}
	r.check, err = checkAggregate(ctx, g, 0)
	return r, err
}

// slowSubscribers are raw NATS connections subscribed to the full
// updates, each reading its socket at fanoutReadRate.
type slowSubscribers struct {
	conns []net.Conn
	read  atomic.Uint64 // bytes read by all
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// dialSlowSubscribers connects fanoutSubscribers subscribers of subject to
// the server at addr, each subscribed (its PING answered) before it
// returns, and starts their slow reading. Close them even on error.
func dialSlowSubscribers(ctx context.Context, addr, subject string) (*slowSubscribers, error) {
	s := &slowSubscribers{stop: make(chan struct{})}
	hello := "CONNECT {\"verbose\":false,\"pedantic\":false,\"protocol\":1,\"headers\":true,\"name\":\"loadtest-slow\"}\r\nSUB " + subject + " 1\r\nPING\r\n"
	for range fanoutSubscribers {
		if err := ctx.Err(); err != nil {
			return s, err
		}
		c, err := net.DialTimeout("tcp", addr, startTimeout)
		if err != nil {
			return s, err
		}
		s.conns = append(s.conns, c)
		if err := c.SetDeadline(time.Now().Add(startTimeout)); err != nil {
			return s, err
		}
		if _, err := c.Write([]byte(hello)); err != nil {
			return s, err
		}
		// INFO, then PONG once the subscription is in place; no update
		// can come before it, since the PONG answers the PING after SUB.
		br := bufio.NewReaderSize(c, 4096)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return s, fmt.Errorf("slow subscriber: %w", err)
			}
			if strings.HasPrefix(line, "-ERR") {
				return s, fmt.Errorf("slow subscriber: %s", strings.TrimSpace(line))
			}
			if line == "PONG\r\n" {
				break
			}
		}
		if err := c.SetDeadline(time.Time{}); err != nil {
			return s, err
		}
		s.wg.Go(func() { s.readSlowly(c) })
	}
	return s, nil
}

// readSlowly reads fanoutReadRate bytes a second from c until stopped or
// closed by the server.
func (s *slowSubscribers) readSlowly(c net.Conn) {
	buf := make([]byte, 16<<10)
	tick := time.NewTicker(fanoutReadTick)
	defer tick.Stop()
	perTick := int(fanoutReadRate * fanoutReadTick / time.Second)
	for {
		deadline := time.Now().Add(fanoutReadTick)
		for budget := perTick; budget > 0; {
			_ = c.SetReadDeadline(deadline)
			n, err := c.Read(buf[:min(len(buf), budget)])
			budget -= n
			s.read.Add(uint64(n))
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				return // closed by the server, or by close
			}
		}
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

// close stops and closes every subscriber, once.
func (s *slowSubscribers) close() {
	s.once.Do(func() {
		close(s.stop)
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.wg.Wait()
	})
}

// slowConsumers reads the server's count of connections it closed as slow
// consumers from its monitoring port.
func slowConsumers(ctx context.Context, port int) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/varz", nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Timeout: requestTimeout}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var v struct {
		SlowConsumers uint64 `json:"slow_consumers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, fmt.Errorf("/varz: %w", err)
	}
	return v.SlowConsumers, nil
}

// fanoutTargets compares the fan-out runs with and without
// --full-interval, when they ran: the server's peak RSS and the ack p99.
func fanoutTargets(find func(string) []runResult) []target {
	var out []target
	for _, sc := range fanoutScenarios {
		runs := find(sc.name)
		if len(runs) == 0 {
			continue
		}
		var peak, end, p99 []float64
		var cut []float64
		for _, r := range runs {
			if f := r.fanout; f != nil {
				peak = append(peak, float64(f.after.peak))
				end = append(end, float64(f.after.rss))
				p99 = append(p99, f.res.Latency.P99.Seconds())
				cut = append(cut, float64(f.cut))
			}
		}
		if len(peak) == 0 {
			continue
		}
		pk, p := spreadOf(peak), spreadOf(p99)
		out = append(out, target{
			name:    fmt.Sprintf("%s: %d slow subscribers of the full updates, 10,000 flows (%s)", sc.name, fanoutSubscribers, argsText(sc.workerArgs)),
			verdict: "measured",
			detail: fmt.Sprintf("nats-server peak RSS %s MB (%s..%s), %s MB at the end; %.0f subscribers closed as slow consumers; ack p99 %s (%s..%s)",
				mbF(pk.med), mbF(pk.min), mbF(pk.max), mbF(spreadOf(end).med), spreadOf(cut).med, durF(p.med), durF(p.min), durF(p.max)),
		})
	}
	return out
}

// argsText names a worker's flags past the defaults.
func argsText(args []string) string {
	if len(args) == 0 {
		return "the worker's defaults"
	}
	return strings.Join(args, " ")
}
