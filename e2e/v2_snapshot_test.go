package e2e

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	fsclient "github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
)

// Size of the large snapshot: nodes reports of flowsPerNode flows each.
const (
	bigNodes        = 20
	bigFlowsPerNode = 10_000
)

// bigReport is node's report of its flowsPerNode flows, all three fields.
func bigReport(node uint64, round int64) fsclient.Report {
	v := flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{}, LastExecTimeMap: map[flowstate.FlowID]int64{}, StartTimeMap: map[flowstate.FlowID]int64{}}
	for i := range flowstate.FlowID(bigFlowsPerNode) {
		id := flowstate.FlowID(node)*bigFlowsPerNode + i
		v.StateSize[id] = uint64(id) * 1024
		v.LastExecTimeMap[id] = 1_700_000_000_000 + int64(i) + round
		v.StartTimeMap[id] = 1_690_000_000_000 + int64(i)
	}
	return fsclient.Report{NodeID: node, Value: v}
}

// workerCPU returns the CPU time the process pid has used so far.
func workerCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(t, err)
	// The fields after the command name, which is in parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime+stime) * (time.Second / 100) // USER_HZ is 100 on Linux
}

// TestASnapshotLargerThanTheMaxPayloadIsReadWhole fills a worker with
// 200,000 flows from 20 nodes, far past the 1 MB default max payload of
// nats-server: the single-message get answers 413, and client.Get and
// `worker get` read the state whole through chunked gets. It logs the time
// to read it and the worker's CPU per chunk (docs/performance.md).
func TestASnapshotLargerThanTheMaxPayloadIsReadWhole(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	args := []string{"--nats-url", srv.URL}
	if code, stdout, _ := runToExit(t, nil, "--help"); code == 0 && strings.Contains(stdout, "--max-total-flows") {
		args = append(args, "--max-total-flows", "1000000")
	}
	w := startWorker(t, args[1], args[2:]...)
	nc := connect(t, w.URL)
	require.EqualValues(t, 1<<20, nc.MaxPayload(), "the server's default max payload")
	c, err := fsclient.New(nc, fsclient.Options{Timeout: deltaWait, MaxFlows: 1_000_000})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*deltaWait)
	defer cancel()
	for node := range uint64(bigNodes) {
		_, err := c.Send(ctx, bigReport(node, 0))
		require.NoError(t, err, "report of node %d", node)
	}

	msg := singleGet(t, nc, w.Prefix, deltaWait)
	assert.Equal(t, "413", msg.Header.Get(micro.ErrorCodeHeader), "the single-message get does not fit 1 MB")

	start := time.Now()
	s, err := c.Get(ctx)
	elapsed := time.Since(start)
	require.NoError(t, err)
	flows := s.Value.Flows()
	require.Len(t, flows, bigNodes*bigFlowsPerNode)
	want := flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{}, LastExecTimeMap: map[flowstate.FlowID]int64{}, StartTimeMap: map[flowstate.FlowID]int64{}}
	for node := range uint64(bigNodes) {
		r := bigReport(node, 0)
		for _, f := range r.Value.Flows() {
			want.StateSize[f.ID], want.LastExecTimeMap[f.ID], want.StartTimeMap[f.ID] = f.StateSize, f.LastExecTime, f.StartTime
		}
	}
	assert.True(t, want.Equal(s.Value), "client.Get read the whole state")
	size := codec.AggregateLen(flows)
	chunks := countChunks(t, nc, w.Prefix)
	t.Logf("client.Get of %d flows (%d bytes of msgpack, %d chunks): %v", len(flows), size, chunks, elapsed)

	// The worker's CPU per chunk: each round changes one node's report, so
	// that each get snapshots, splits and encodes a new version.
	const rounds = 10
	pid := w.p.cmd.Process.Pid
	cpu0 := workerCPU(t, pid)
	var cpuReports time.Duration
	for round := range int64(rounds) {
		before := workerCPU(t, pid)
		_, err := c.Send(ctx, bigReport(uint64(round%bigNodes), round+1))
		require.NoError(t, err)
		cpuReports += workerCPU(t, pid) - before
		_, err = c.Get(ctx)
		require.NoError(t, err)
	}
	cpuGets := workerCPU(t, pid) - cpu0 - cpuReports
	t.Logf("worker CPU over %d chunked gets of a new version: %v, %v per get, %v per chunk (reports between them: %v)",
		rounds, cpuGets, cpuGets/rounds, cpuGets/time.Duration(rounds*chunks), cpuReports)

	// worker get, the binary, reads it too.
	start = time.Now()
	p := startProcess(t, "worker get", bin.worker, nil, "get", "--nats-url", srv.URL, "--timeout", "30s")
	code, ok := p.wait(2 * deltaWait)
	require.True(t, ok, "worker get did not exit")
	t.Logf("worker get of %d flows: %v (with printing the table)", len(flows), time.Since(start))
	require.Equal(t, 0, code, "stderr: %s", p.stderr.String())
	out := p.stdout.String()
	assert.Equal(t, bigNodes*bigFlowsPerNode+1+2, strings.Count(out, "\n"), "a header, one line a flow, a blank line and the version")
	assert.Regexp(t, regexp.MustCompile(`epoch \S+, revision \d+\n$`), out)
}

// countChunks sends a chunked get and returns how many chunks answer it.
func countChunks(t testing.TB, nc *nats.Conn, prefix string) int {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	req := nats.NewMsg(prefix + ".state.get")
	req.Reply = inbox
	req.Header.Set("Flow-State-Chunks", "1")
	require.NoError(t, nc.PublishMsg(req))
	for n := 1; n < 1<<20; n++ {
		msg, err := sub.NextMsg(deltaWait)
		require.NoError(t, err)
		require.LessOrEqual(t, len(msg.Data)+len(msg.Header.Get("Flow-State-Chunk")), int(nc.MaxPayload()))
		i, total, ok := strings.Cut(msg.Header.Get("Flow-State-Chunk"), "/")
		require.True(t, ok, "Flow-State-Chunk on every chunk")
		require.Equal(t, strconv.Itoa(n), i)
		if i == total {
			return n
		}
	}
	require.FailNow(t, "chunks never end")
	return 0
}

// singleGet sends the single-message (v1) get on prefix through nc,
// bounded by within, and returns the reply: what a client that predates
// chunked gets receives.
func singleGet(t testing.TB, nc *nats.Conn, prefix string, within time.Duration) *nats.Msg {
	t.Helper()
	msg, err := nc.Request(prefix+".state.get", nil, within)
	require.NoError(t, err, "single-message get")
	return msg
}

// singleState decodes a single-message get's msgpack reply as the state
// client.Get returns.
func singleState(t testing.TB, msg *nats.Msg) fsclient.State {
	t.Helper()
	a := parseAggregateMsg(t, msg)
	v, err := codec.DecodeAggregate(a.Body)
	require.NoError(t, err, "the single-message get's aggregate")
	return fsclient.State{Version: flowstate.Version{Epoch: a.Epoch, Revision: a.Revision}, Value: v}
}
