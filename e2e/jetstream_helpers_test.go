package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/wait"
)

// The bucket of --kv jetstream, and its keys.
const (
	jsBucket     = "flow_state"
	jsStateKey   = "__flow/state"
	jsEpochKey   = "__flow/epoch"
	jsPublishKey = "__flow/publisher"
)

// startJetStreamServer runs nats-server with JetStream, storing in a
// directory of its own.
func startJetStreamServer(t testing.TB) *natsServer {
	t.Helper()
	return startServer(t, "-js", "-sd", t.TempDir())
}

// startJSWorkers runs n workers with --kv jetstream on natsURL, one after
// the other, each awaited until it serves.
func startJSWorkers(t testing.TB, natsURL string, n int, extraArgs ...string) []*workerProc {
	t.Helper()
	var ws []*workerProc
	var ids []string
	for range n {
		w := launchWorker(t, nil, append([]string{"--nats-url", natsURL, "--kv", "jetstream"}, extraArgs...)...)
		w.URL = strings.Split(natsURL, ",")[0]
		w.awaitReady(ids...)
		ids = append(ids, w.ID)
		ws = append(ws, w)
	}
	return ws
}

// jsKV opens the workers' bucket from the test's side, as `nats kv` does.
func jsKV(t testing.TB, nc *nats.Conn) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(t.Context(), jsBucket)
	require.NoError(t, err)
	return js, kv
}

// reporters simulate flownodes that report as requests, each retrying a
// report until it is acked (as a flownode's next heartbeat would carry the
// same state), so that the expected aggregate is each node's last report.
type reporters struct {
	t      testing.TB
	c      *client
	nodes  int
	pause  time.Duration // between two reports of a node
	wg     sync.WaitGroup
	stop   chan struct{}
	mu     sync.Mutex // guards last and acks
	last   map[uint64]flowState
	acks   []version
	failed atomic.Int64 // requests not acked (timeouts, 503)
	codes  sync.Map     // error code -> count
}

// startReporters starts nodes reporting until stopAndWait.
func startReporters(t testing.TB, c *client, nodes int, pause time.Duration) *reporters {
	r := &reporters{t: t, c: c, nodes: nodes, pause: pause, stop: make(chan struct{}), last: map[uint64]flowState{}}
	for node := range uint64(nodes) {
		r.wg.Go(func() { r.run(node) })
	}
	return r
}

// nodeReport is round k of node: its own flows, and flow 1 that every node
// reports (the aggregate keeps the max).
func nodeReport(node uint64, k int) flowState {
	s := flowState{StateSize: map[uint32]uint64{}, LastExecTime: map[uint32]int64{}, StartTime: map[uint32]int64{}}
	base := uint32(node*10 + 100)
	for i := range uint32(1 + k%3) {
		s.StateSize[base+i] = uint64(k*1000) + uint64(node)
		s.LastExecTime[base+i] = 1700000000000 + int64(k)
	}
	s.StartTime[base] = 1600000000000 + int64(node)
	s.LastExecTime[1] = 1700000000000 + int64(k)*100 + int64(node)
	return s
}

func (r *reporters) run(node uint64) {
	rng := rand.New(rand.NewPCG(node, 7))
	for k := 0; ; k++ {
		select {
		case <-r.stop:
			return
		default:
		}
		s := nodeReport(node, k)
		body := codecReport(node, s)
		for {
			// A request times out later than any worker may hold it, so
			// that no older copy of a report is still queued somewhere
			// when the next one is sent.
			msg, err := r.c.nc.Request(r.c.heartbeatSubject(node), body, requestTimeout)
			if err == nil && msg.Header.Get(micro.ErrorCodeHeader) == "" {
				rev, perr := strconv.ParseUint(msg.Header.Get(hdrRevision), 10, 64)
				if !assert.NoError(r.t, perr, "revision of an ack") {
					return
				}
				v := version{Epoch: msg.Header.Get(hdrEpoch), Revision: rev}
				r.mu.Lock()
				r.last[node] = s
				r.acks = append(r.acks, v)
				r.mu.Unlock()
				break
			}
			r.failed.Add(1)
			code := "timeout"
			if err == nil {
				code = msg.Header.Get(micro.ErrorCodeHeader)
				if !assert.Equal(r.t, "503", code, "only 503 is expected: %s", msg.Header.Get(micro.ErrorHeader)) {
					return
				}
			} else if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
				code = err.Error()
			}
			n, _ := r.codes.LoadOrStore(code, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(r.pause/2 + time.Duration(rng.Int64N(int64(r.pause)+1)))
	}
}

// stopAndWait stops the nodes once their report in flight is acked.
func (r *reporters) stopAndWait() {
	close(r.stop)
	r.wg.Wait()
}

// acked returns how many reports were acked so far.
func (r *reporters) acked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acks)
}

// awaitAcks waits until n more reports have been acked.
func (r *reporters) awaitAcks(n int, timeout time.Duration) {
	r.t.Helper()
	want := r.acked() + n
	wait.Until(r.t, timeout, 10*time.Millisecond, func() (bool, string) {
		got := r.acked()
		return got >= want, fmt.Sprintf("%d reports acked, want %d; failures: %s", got, want, r.failures())
	})
}

// want is the aggregate of every node's last acked report.
func (r *reporters) want() flowState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return aggregateOf(r.last)
}

// epochs returns the epochs of every ack.
func (r *reporters) epochs() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, v := range r.acks {
		out[v.Epoch]++
	}
	return out
}

func (r *reporters) failures() string {
	var parts []string
	r.codes.Range(func(k, v any) bool {
		parts = append(parts, fmt.Sprintf("%v: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	return "[" + strings.Join(parts, ", ") + "]"
}

// getStats returns how many gets each worker (by micro service id) served.
func getStats(t testing.TB, nc *nats.Conn, ids []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, id := range ids {
		msg, err := nc.Request("$SRV.STATS."+serviceName+"."+id, nil, requestTimeout)
		require.NoError(t, err)
		var stats micro.Stats
		require.NoError(t, json.Unmarshal(msg.Data, &stats))
		for _, e := range stats.Endpoints {
			if e.Name == "get" {
				out[id] = e.NumRequests
			}
		}
	}
	return out
}

// requireConverged gets the state n times, from whichever worker answers,
// and requires every get to be want at one version; it returns it.
func requireConverged(t testing.TB, c *client, want flowState, n int) version {
	t.Helper()
	var first version
	for i := range n {
		v := c.requireState(want)
		if i == 0 {
			first = v
		}
		require.Equal(t, first, v, "get %d: the same state at the same version on every worker", i)
	}
	return first
}

// awaitConverged waits, within timeout, until n gets in a row, from
// whichever workers answer, all return want.
func awaitConverged(t testing.TB, c *client, want flowState, n int, timeout time.Duration) {
	t.Helper()
	want = want.normalized()
	wait.Until(t, timeout, 50*time.Millisecond, func() (bool, string) {
		for i := range n {
			// A worker whose read barrier cannot pass yet answers 503.
			msg, err := c.nc.Request(c.prefix+".state.get", nil, requestTimeout)
			switch {
			case err != nil:
				return false, fmt.Sprintf("get %d in a row: %v", i, err)
			case msg.Header.Get(micro.ErrorCodeHeader) != "":
				return false, fmt.Sprintf("get %d in a row answered %s", i, msg.Header.Get(micro.ErrorCodeHeader))
			case !reflect.DeepEqual(want, decodeAggregate(t, msg.Data)):
				return false, fmt.Sprintf("get %d in a row: not the final state", i)
			}
		}
		return true, ""
	})
}

// awaitKey waits until the bucket's key holds want.
func awaitKey(t testing.TB, kv jetstream.KeyValue, key, want string) {
	t.Helper()
	wait.Until(t, messageTimeout, 20*time.Millisecond, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		e, err := kv.Get(ctx, key)
		if err != nil {
			return false, fmt.Sprintf("key %s of the bucket: %v", key, err)
		}
		got := string(e.Value())
		return got == want, fmt.Sprintf("key %s of the bucket holds %q, want %q", key, got, want)
	})
}

// awaitEpochChange polls get until the epoch differs from old, and returns
// the first get of the new epoch.
func awaitEpochChange(t testing.TB, c *client, old string, timeout time.Duration) aggregateMsg {
	t.Helper()
	var m aggregateMsg
	wait.Until(t, timeout, 20*time.Millisecond, func() (bool, string) {
		msg, err := c.nc.Request(c.prefix+".state.get", nil, requestTimeout)
		if err != nil {
			return false, fmt.Sprintf("no new epoch: get: %v", err)
		}
		if msg.Header.Get(micro.ErrorHeader) != "" {
			return false, fmt.Sprintf("no new epoch: get answered %s", msg.Header.Get(micro.ErrorCodeHeader))
		}
		m = parseAggregateMsg(t, msg)
		return m.Epoch != old, fmt.Sprintf("no new epoch: still %s", old)
	})
	return m
}

// awaitEveryWorkerAt waits until ten gets in a row, answered by whichever
// workers the queue group picks, show version v: a worker that has not
// moved to v's epoch yet answers 503 meanwhile (its read barrier refuses a
// wiped epoch), and no get may show another state.
func awaitEveryWorkerAt(t testing.TB, c *client, v version, timeout time.Duration, what string) {
	t.Helper()
	wait.Until(t, timeout, 20*time.Millisecond, func() (bool, string) {
		for i := range 10 {
			msg, err := c.nc.Request(c.prefix+".state.get", nil, requestTimeout)
			if err != nil {
				return false, fmt.Sprintf("%s: the workers do not all serve %+v: get %d in a row: %v", what, v, i, err)
			}
			if code := msg.Header.Get(micro.ErrorCodeHeader); msg.Header.Get(micro.ErrorHeader) != "" {
				return false, fmt.Sprintf("%s: the workers do not all serve %+v: get %d in a row answered %s", what, v, i, code)
			}
			require.Equal(t, v, parseAggregateMsg(t, msg).version, "%s: a get showed another state", what)
		}
		return true, ""
	})
}

// publishesTotal scrapes a worker's flowstate_publishes_total.
func publishesTotal(t testing.TB, body string) int {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "flowstate_publishes_total "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return int(n)
		}
	}
	t.Fatalf("no flowstate_publishes_total in:\n%s", body)
	return 0
}
