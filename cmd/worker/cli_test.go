package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/protocol"
)

// sendFlows sends a report of node with flows given as id -> size, last,
// start, where a negative value means absent.
func sendFlows(tb testing.TB, c *client.Client, node uint64, flows ...flowstate.Flow) flowstate.Version {
	tb.Helper()
	v, err := c.Send(bounded(tb), client.Report{NodeID: node, Value: flowstate.ValueOf(flows)})
	require.NoError(tb, err)
	return v
}

func flow(id flowstate.FlowID, size uint64, last, start int64, has flowstate.Fields) flowstate.Flow {
	return flowstate.Flow{ID: id, Has: has, StateSize: size, LastExecTime: last, StartTime: start}
}

const all = flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime

func TestGetPrintsATableAndTheVersion(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	c := testClient(t, srv, "flow")
	sendFlows(t, c, 1,
		flow(1, 1024, 1700000060000, 1700000000000, all),
		flow(2, 1536, 0, 0, flowstate.HasStateSize))
	v := sendFlows(t, c, 2,
		flow(10, 5<<20, 1700000000000, 0, flowstate.HasStateSize|flowstate.HasLastExecTime),
		flow(11, 0, 1700003600500, 1700000000000, flowstate.HasLastExecTime|flowstate.HasStartTime))

	code, stdout, stderr := runCLI(t, noEnv, "get", "--nats-url", srv.ClientURL())
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	assert.Equal(t, `FLOW  STATE SIZE  LAST EXECUTION        START                 UPTIME
1     1.0 KiB     2023-11-14T22:14:20Z  2023-11-14T22:13:20Z  1m0s
2     1.5 KiB     -                     -                     -
10    5.0 MiB     2023-11-14T22:13:20Z  -                     -
11    -           2023-11-14T23:13:20Z  2023-11-14T22:13:20Z  1h0m1s

`+fmt.Sprintf("epoch %s, revision %d\n", v.Epoch, v.Revision), stdout)
}

func TestGetOfAnEmptyStateSaysSo(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	s, err := testClient(t, srv, "flow").Get(bounded(t))
	require.NoError(t, err)

	code, stdout, stderr := runCLI(t, noEnv, "get", "--nats-url", srv.ClientURL())
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, fmt.Sprintf("no flows\n\nepoch %s, revision 0\n", s.Epoch), stdout)
}

func TestGetJSONPrintsTheWorkersBytesAndANewline(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	c := testClient(t, srv, "flow")
	sendFlows(t, c, 1, flow(2, 2048, 1700000000000, 0, flowstate.HasStateSize|flowstate.HasLastExecTime), flow(10, 1, 0, 0, flowstate.HasStateSize))

	code, stdout, stderr := runCLI(t, noEnv, "get", "--json", "--nats-url", srv.ClientURL())
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	assert.Equal(t, `{"state_size":{"2":2048,"10":1},"last_exec_time_map":{"2":1700000000000},"start_time_map":{}}`+"\n", stdout)
}

// TestGetJSONPrintsAStateLargerThanOneMessage: past the server's max
// payload the worker's single-message JSON answers 413, and get --json
// still prints GreptimeDB's exact bytes, rendered from a chunked snapshot.
func TestGetJSONPrintsAStateLargerThanOneMessage(t *testing.T) {
	srv := natstest.Start(t, &server.Options{MaxPayload: 8192})
	startTestWorker(t, srv, consumer.Config{})
	c := testClient(t, srv, "flow")
	var flows []flowstate.Flow
	for node := range uint64(10) {
		var report []flowstate.Flow
		for k := range flowstate.FlowID(30) {
			report = append(report, flow(flowstate.FlowID(node)*100+k, 1<<20, 1700000000000, 1690000000000, all))
		}
		sendFlows(t, c, node, report...)
		flows = append(flows, report...)
	}
	msg := singleGet(t, srv, "flow.state.get", "application/json")
	require.Equal(t, "413", msg.Header.Get(micro.ErrorCodeHeader), "the single-message JSON does not fit")

	code, stdout, stderr := runCLI(t, noEnv, "get", "--json", "--nats-url", srv.ClientURL())
	require.Equal(t, 0, code, stderr)
	want := string(flowstate.AppendJSON(nil, flows)) + "\n"
	require.Greater(t, len(want), 8192)
	assert.Equal(t, want, stdout)
}

func TestSubcommandsTakeURLAndPrefixFromTheEnvironmentAndFlagsWin(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{Prefix: "staging.flow"})
	env := map[string]string{"FLOWSTATE_NATS_URL": srv.ClientURL(), "FLOWSTATE_PREFIX": "staging.flow"}
	getenv := func(k string) string { return env[k] }

	code, stdout, stderr := runCLI(t, getenv, "send", "--node", "1")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "applied at revision")

	code, _, stderr = runCLI(t, getenv, "get", "--prefix", "other")
	assert.Equal(t, 1, code, "the flag wins: no worker serves prefix other")
	assert.Contains(t, stderr, "no worker")
}

func TestGetWithoutWorkerExits1WithOneLine(t *testing.T) {
	srv := startTestServer(t)
	code, stdout, stderr := runCLI(t, noEnv, "get", "--nats-url", srv.ClientURL(), "--timeout", "2s")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Regexp(t, `^worker get: .*no worker is serving.*\n$`, stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\n"))
}

func TestSendPrintsTheRevisionTheReportWasAppliedAt(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	c := testClient(t, srv, "flow")
	before := time.Now().UnixMilli()

	code, stdout, stderr := runCLI(t, noEnv, "send", "--nats-url", srv.ClientURL(), "--node", "5",
		"--node-epoch", "1699999999000", "--flow", "7:1024:1700000000000:1699990000000", "--flow", "8:-:now")
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stderr)
	s, err := c.Get(bounded(t))
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("applied at revision %d, epoch %s\n", s.Revision, s.Epoch), stdout)
	assert.Equal(t, map[flowstate.FlowID]uint64{7: 1024}, s.Value.StateSize)
	assert.Equal(t, int64(1700000000000), s.Value.LastExecTimeMap[7])
	assert.GreaterOrEqual(t, s.Value.LastExecTimeMap[8], before, "now")
	assert.Equal(t, map[flowstate.FlowID]int64{7: 1699990000000}, s.Value.StartTimeMap)

	// No --flow: an empty report removes the node's flows.
	code, stdout, stderr = runCLI(t, noEnv, "send", "--nats-url", srv.ClientURL(), "--node", "5")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^applied at revision \d+, epoch `+s.Epoch+"\n$", stdout)
	s, err = c.Get(bounded(t))
	require.NoError(t, err)
	assert.Empty(t, s.Value.Flows())
}

func TestSendNoAckPublishesTheReport(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	c := testClient(t, srv, "flow")
	w := testWatch(t, c)

	code, stdout, stderr := runCLI(t, noEnv, "send", "--nats-url", srv.ClientURL(), "--node", "1", "--flow", "3:3:3", "--no-ack")
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stdout)
	s := w()
	assert.Equal(t, map[flowstate.FlowID]uint64{3: 3}, s.Value.StateSize)
}

// testWatch follows c's state from now; next returns the next state after
// the current one.
func testWatch(tb testing.TB, c *client.Client) (next func() client.State) {
	tb.Helper()
	ctx := bounded(tb)
	states := make(chan client.State, 100)
	go func() {
		defer close(states)
		for s, err := range c.Watch(ctx) {
			if err == nil {
				states <- s.Clone()
			}
		}
	}()
	next = func() client.State {
		tb.Helper()
		select {
		case s, ok := <-states:
			require.True(tb, ok, "watch ended")
			return s
		case <-time.After(cliWait):
			require.FailNow(tb, "no state")
			return client.State{}
		}
	}
	next() // the snapshot: the watch is subscribed
	return next
}

// TestSendOutWritesTheBodyAnotherClientSends sends the file that --out
// writes as a plain NATS request, as `nats req flow.heartbeat.7
// --force-stdin < report.bin` does, and sees the worker apply it.
func TestSendOutWritesTheBodyAnotherClientSends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.bin")
	// No server: --out does not connect.
	code, stdout, stderr := runCLI(t, noEnv, "send", "--nats-url", "nats://127.0.0.1:1",
		"--node", "7", "--flow", "3:2048:1700000000000:1690000000000", "--out", path)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stdout)
	assert.Empty(t, stderr)
	body, err := os.ReadFile(path)
	require.NoError(t, err)

	code, stdout, stderr = runCLI(t, noEnv, "send", "--node", "7",
		"--flow", "3:2048:1700000000000:1690000000000", "--out", "-")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, string(body), stdout, "--out - writes the same body to stdout")

	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("test-raw"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	reply, err := nc.RequestWithContext(bounded(t), "flow.heartbeat.7", body)
	require.NoError(t, err)
	assert.Empty(t, reply.Header.Get(protocol.HeaderErrorCode), "the worker accepts the body")

	s, err := testClient(t, srv, "flow").Get(bounded(t))
	require.NoError(t, err)
	assert.Equal(t, map[flowstate.FlowID]uint64{3: 2048}, s.Value.StateSize)
	assert.Equal(t, map[flowstate.FlowID]int64{3: 1700000000000}, s.Value.LastExecTimeMap)
	assert.Equal(t, map[flowstate.FlowID]int64{3: 1690000000000}, s.Value.StartTimeMap)
}

func TestSendOfARejectedReportPrintsTheReasonAndExits1(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{MaxFlows: 1})
	code, stdout, stderr := runCLI(t, noEnv, "send", "--nats-url", srv.ClientURL(), "--node", "1", "--flow", "1:1:1", "--flow", "2:2:2")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Regexp(t, `^worker send: report rejected: .*flows.*\n$`, stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\n"))
}

func TestBadFlagsExit2WithOneLine(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":         {"get", "--bogus"},
		"positional argument":  {"get", "extra"},
		"empty prefix":         {"get", "--prefix", ""},
		"wildcard prefix":      {"watch", "--prefix", "flow.>"},
		"negative count":       {"watch", "--count", "-1"},
		"send without node":    {"send", "--flow", "1:1:1"},
		"negative node":        {"send", "--node", "-1"},
		"flow without times":   {"send", "--node", "1", "--flow", "7:1024"},
		"flow id not uint32":   {"send", "--node", "1", "--flow", "4294967296:1:1"},
		"size not a number":    {"send", "--node", "1", "--flow", "7:1k:1"},
		"time not a number":    {"send", "--node", "1", "--flow", "7:1:yesterday"},
		"flow given twice":     {"send", "--node", "1", "--flow", "7:1:1", "--flow", "7:2:2"},
		"out with no-ack":      {"send", "--node", "1", "--out", "-", "--no-ack"},
		"bench without nodes":  {"bench", "--nodes", "0"},
		"bench bad duration":   {"bench", "--duration", "soon"},
		"bench zero duration":  {"bench", "--duration", "0s"},
		"bench negative rate":  {"bench", "--rate", "-5"},
		"bench too many flows": {"bench", "--nodes", "1000000", "--flows", "10000"},
		"zero timeout":         {"get", "--timeout", "0s"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, noEnv, args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, stdout)
			assert.Regexp(t, `^worker `+args[0]+`: .* \(see worker `+args[0]+` --help\)\n$`, stderr)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
		})
	}
}

func TestSubcommandHelpPrintsUsageAndExits0(t *testing.T) {
	for _, sub := range []string{"get", "watch", "send", "bench"} {
		for _, help := range []string{"--help", "-h"} {
			code, stdout, stderr := runCLI(t, noEnv, sub, help)
			assert.Equal(t, 0, code, sub)
			assert.Empty(t, stderr, sub)
			assert.Contains(t, stdout, "Usage:\n  worker "+sub, sub)
			assert.Contains(t, stdout, "--nats-url URL", sub)
			assert.Contains(t, stdout, "(default nats://127.0.0.1:4222)", sub)
			assert.Contains(t, stdout, "env FLOWSTATE_PREFIX", sub)
			assert.Contains(t, stdout, "\nExample:\n  worker "+sub, sub)
		}
	}
	code, stdout, _ := runCLI(t, noEnv, "--help")
	assert.Equal(t, 0, code)
	for _, sub := range []string{"get", "watch", "send", "bench"} {
		assert.Regexp(t, `\n  `+sub+` +\S`, stdout, "worker --help names %s", sub)
	}
}

func TestWatchPrintsOneLinePerStateAndStopsAfterCount(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	c := testClient(t, srv, "flow")
	out := newLineWriter()
	var errOut strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"watch", "--nats-url", srv.ClientURL(), "--count", "3"}, noEnv, out, &errOut)
	}()

	first := out.next(t) // printed after subscribing: updates from now on are seen
	v1 := sendFlows(t, c, 1, flow(1, 1024, 1, 0, flowstate.HasStateSize|flowstate.HasLastExecTime))
	second := out.next(t)
	v2 := sendFlows(t, c, 2, flow(2, 2048, 1, 0, flowstate.HasStateSize), flow(3, 0, 5, 0, flowstate.HasLastExecTime))
	third := out.next(t)

	select {
	case code := <-done:
		assert.Equal(t, 0, code, errOut.String())
	case <-time.After(cliWait):
		t.Fatal("watch did not stop after --count 3")
	}
	ts := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`
	e := regexp.QuoteMeta(v1.Epoch)
	assert.Regexp(t, `^`+ts+`  epoch `+e+`  revision 0  flows 0  size 0 B$`, first)
	assert.Regexp(t, fmt.Sprintf(`^%s  epoch %s  revision %d  flows 1  size 1\.0 KiB$`, ts, e, v1.Revision), second)
	assert.Regexp(t, fmt.Sprintf(`^%s  epoch %s  revision %d  flows 3  size 3\.0 KiB$`, ts, e, v2.Revision), third)
	assert.Empty(t, errOut.String())
}

func TestBenchReportsRateLatencyAndAnExactAggregate(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	code, stdout, stderr := runCLI(t, noEnv, "bench", "--nats-url", srv.ClientURL(),
		"--nodes", "20", "--flows", "5", "--duration", "1s")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "aggregate: exact (100 flows")
	assert.Regexp(t, `(?m)^sent \d+, acked \d+, failed 0 in `, stdout)
	assert.Regexp(t, `(?m)^applied rate: \d+\.\d reports/s$`, stdout)
	assert.Regexp(t, `(?m)^ack latency: p50 \S+, p99 \S+, max \S+$`, stdout)
	assert.Regexp(t, `\r *\d+s  sent \d+  acked \d+  failed 0  rate \d+/s`, stderr, "progress line")
	assert.True(t, strings.HasSuffix(stderr, "\n"), "the progress line is ended")
}

func TestBenchSaysWhatDiffersAndExits1(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	sendFlows(t, testClient(t, srv, "flow"), 1000, flow(999999, 1, 1, 1, all))

	code, stdout, stderr := runCLI(t, noEnv, "bench", "--nats-url", srv.ClientURL(),
		"--nodes", "2", "--flows", "2", "--rate", "100", "--duration", "200ms", "--force")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stdout, "aggregate: DIFFERS")
	assert.Contains(t, stdout, "  flow 999999: present, but no simulated node owns it\n")
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1<<20 - 1: "1.0 MiB",
		5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB", 1 << 40: "1.0 TiB", 1<<64 - 1: "16.0 EiB",
	} {
		assert.Equal(t, want, humanSize(n), "%d", n)
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 1500 * time.Millisecond: "1.5s", time.Minute + 499*time.Millisecond: "1m0s",
		time.Hour + 500*time.Millisecond: "1h0m1s", 48 * time.Hour: "2d",
		73*time.Hour + 30*time.Minute: "3d1h30m0s", -2 * time.Second: "-2s",
	} {
		assert.Equal(t, want, humanDuration(d), "%v", d)
	}
}

func TestParseFlowSpec(t *testing.T) {
	now := time.UnixMilli(1700000000123)
	for spec, want := range map[string]flowstate.Flow{
		"7:1024:1700000000000":       flow(7, 1024, 1700000000000, 0, flowstate.HasStateSize|flowstate.HasLastExecTime),
		"7:1024:now:1699999999999":   flow(7, 1024, 1700000000123, 1699999999999, all),
		"7:-:-:now":                  flow(7, 0, 0, 1700000000123, flowstate.HasStartTime),
		"4294967295:0:-5:-":          flow(4294967295, 0, -5, 0, flowstate.HasStateSize|flowstate.HasLastExecTime),
		"0:18446744073709551615:0:0": flow(0, 1<<64-1, 0, 0, all),
	} {
		got, err := parseFlowSpec(spec, now)
		require.NoError(t, err, spec)
		assert.Equal(t, want, got, spec)
	}
	for _, bad := range []string{"", "7", "7:1", "7:1:1:1:1", "-7:1:1", "x:1:1", "7:-1:1", "7:1:1.5", "7:1:1:later"} {
		_, err := parseFlowSpec(bad, now)
		assert.Error(t, err, bad)
	}
}

// TestSendTakesTheV3FieldsAndAStaleOneExits1: --rows, --error and --seq go
// into the report; the stats view holds them; the same --seq again is
// refused as stale with the worker's reason.
func TestSendTakesTheV3FieldsAndAStaleOneExits1(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	args := []string{"send", "--nats-url", srv.ClientURL(), "--node", "7", "--node-epoch", "1700000000000", "--seq", "42",
		"--flow", "1:1024:1700000000000", "--rows", "1:52000", "--error", "1:1700000000000:sink table missing"}
	code, _, stderr := runCLI(t, noEnv, args...)
	require.Equal(t, 0, code, stderr)

	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	msg, err := nc.RequestMsg(&nats.Msg{Subject: "flow.state.get", Header: nats.Header{
		protocol.HeaderView: {protocol.ViewStats}, protocol.HeaderAccept: {protocol.ContentTypeJSON}}}, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, `{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{},"processed_rows":{"1":52000},"last_errors":{"1":[{"time":1700000000000,"node_id":7,"message":"sink table missing"}]}}`,
		string(msg.Data))

	code, stdout, stderr := runCLI(t, noEnv, args...)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Regexp(t, `^worker send: .*409.*stale report of node 7: node_epoch 1700000000000 seq 42, the state holds node_epoch 1700000000000 seq 42\n$`, stderr)
}

// TestGetStatsPrintsTheFlowStats: worker get --stats prints a line per flow
// with its rows, error count and newest error (control characters escaped),
// and --stats --json the view's bytes.
func TestGetStatsPrintsTheFlowStats(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	code, _, stderr := runCLI(t, noEnv, "send", "--nats-url", srv.ClientURL(), "--node", "7",
		"--flow", "1:1024:1700000060000:1700000000000", "--rows", "1:52000", "--error", "1:1700000000000:sink\x1b[31m table missing")
	require.Equal(t, 0, code, stderr)

	code, stdout, stderr := runCLI(t, noEnv, "get", "--nats-url", srv.ClientURL(), "--stats")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 3, stdout)
	assert.Regexp(t, `^1 +1\.0 KiB .* 1m0s +52000 +1  .*node 7: sink\\x1b\[31m table missing$`, lines[1])
	assert.NotContains(t, stdout, "\x1b", "no control character reaches the terminal")
	assert.Regexp(t, `^epoch \S+, revision 1, 1 flows$`, lines[2])

	code, stdout, stderr = runCLI(t, noEnv, "get", "--nats-url", srv.ClientURL(), "--stats", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, `{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000060000},"start_time_map":{"1":1700000000000},"processed_rows":{"1":52000},"last_errors":{"1":[{"time":1700000000000,"node_id":7,"message":"sink\u001b[31m table missing"}]}}`+"\n", stdout)
}

// TestGetStatsPrintsAViewLargerThanOneMessage: past the server's max
// payload the worker's single-message stats view answers 413, and get
// --stats (a table) and --stats --json still print the whole view, read in
// chunks; the JSON is the worker's bytes.
func TestGetStatsPrintsAViewLargerThanOneMessage(t *testing.T) {
	srv := natstest.Start(t, &server.Options{MaxPayload: 4096})
	startTestWorker(t, srv, consumer.Config{})
	c := testClient(t, srv, "flow")
	var flows []flowstate.Flow
	var nodes []flowstate.NodeHealth
	for node := range uint64(6) {
		r := client.Report{NodeID: node, Health: flowstate.Health{HasProcessedRows: true, HasLastErrors: true}}
		for k := range flowstate.FlowID(10) {
			id := flowstate.FlowID(node)*100 + k
			flows = append(flows, flow(id, 1<<20, 1700000000000, 1690000000000, all))
			r.Health.Flows = append(r.Health.Flows, flowstate.FlowHealth{ID: id, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors,
				ProcessedRows: 1000 + uint64(id), LastErrors: []flowstate.FlowError{{Time: 1700000000000, Message: strings.Repeat("x", 50)}}})
		}
		r.Value = flowstate.ValueOf(flows[len(flows)-10:])
		_, err := c.Send(bounded(t), r)
		require.NoError(t, err)
		h := r.Health
		nodes = append(nodes, flowstate.NodeHealth{NodeID: node, Health: &h})
	}
	want := string(flowstate.AppendStatsJSON(nil, flows, flowstate.MergeHealth(nil, nodes))) + "\n"
	require.Greater(t, len(want), 4096)
	req := nats.NewMsg("flow.state.get")
	req.Header.Set(protocol.HeaderView, protocol.ViewStats)
	msg := natstest.Request(t, srv, req, cliWait)
	require.Equal(t, "413", msg.Header.Get(micro.ErrorCodeHeader), "the single-message view does not fit")

	code, stdout, stderr := runCLI(t, noEnv, "get", "--stats", "--json", "--nats-url", srv.ClientURL())
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want, stdout)

	code, stdout, stderr = runCLI(t, noEnv, "get", "--stats", "--nats-url", srv.ClientURL())
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 1+60+1, stdout)
	assert.Regexp(t, `^509 +1\.0 MiB .* 1509 +1  .*node 5: x{50}$`, lines[60])
	assert.Regexp(t, `^epoch \S+, revision \d+, 60 flows$`, lines[61])
}

// TestSendSendsExactlyWhatTheFlagsSay: worker send does not number its
// report (no node_epoch, no seq without the flags), so the same command
// twice is applied twice.
func TestSendSendsExactlyWhatTheFlagsSay(t *testing.T) {
	srv := startTestServer(t)
	startTestWorker(t, srv, consumer.Config{})
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	sub, err := nc.SubscribeSync("flow.heartbeat.7")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	args := []string{"send", "--nats-url", srv.ClientURL(), "--node", "7", "--flow", "1:1024:1700000000000"}
	var revisions []string
	for range 2 {
		code, stdout, stderr := runCLI(t, noEnv, args...)
		require.Equal(t, 0, code, stderr)
		revisions = append(revisions, stdout)
		msg, err := sub.NextMsg(cliWait)
		require.NoError(t, err)
		var d codec.Decoder
		var r codec.Report
		require.NoError(t, d.Decode(msg.Data, &r))
		assert.False(t, r.HasNodeEpoch, "no node_epoch")
		assert.False(t, r.Health.HasSeq, "no seq")
	}
	assert.NotEqual(t, revisions[0], revisions[1], "applied twice, at two revisions")
}
