package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/consumer"
)

// envOf is a getenv over m.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestNewFlagsHaveTheirDefaultsVariablesAndFlagsWin(t *testing.T) {
	c, err := parseConfig(nil, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 10000, c.MaxNodes)
	assert.Equal(t, 100000, c.MaxTotalFlows)
	assert.Equal(t, "both", c.StateUpdates)
	assert.Equal(t, 256, c.KVWindow)
	assert.Equal(t, 0, c.MetricsFlows)
	assert.False(t, c.PProf)
	assert.False(t, c.ListenInsecure)

	env := envOf(map[string]string{
		"FLOWSTATE_MAX_NODES": "5", "FLOWSTATE_MAX_TOTAL_FLOWS": "6", "FLOWSTATE_STATE_UPDATES": "delta",
		"FLOWSTATE_KV_WINDOW": "7", "FLOWSTATE_METRICS_FLOWS": "8", "FLOWSTATE_METRICS_ADDR": "127.0.0.1:0",
		"FLOWSTATE_PPROF": "true", "FLOWSTATE_KV": "jetstream", "FLOWSTATE_NATS_URL": "nats://127.0.0.1:4222",
	})
	c, err = parseConfig(nil, env, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []any{5, 6, "delta", 7, 8, true}, []any{c.MaxNodes, c.MaxTotalFlows, c.StateUpdates, c.KVWindow, c.MetricsFlows, c.PProf})
	assert.Equal(t, c.limits().MaxNodes, 5)
	assert.Equal(t, c.limits().MaxFlows, 6)

	c, err = parseConfig([]string{"--full-interval", "5s"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, c.consumerConfig().FullInterval)
	assert.Equal(t, consumer.DefaultPublishInterval, c.consumerConfig().PublishInterval, "deltas keep theirs")

	c, err = parseConfig([]string{"--max-nodes", "50", "--state-updates", "full", "--pprof=false"}, env, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 50, c.MaxNodes, "the flag wins")
	assert.Equal(t, "full", c.StateUpdates)
	assert.False(t, c.PProf)
}

func TestBadDaemonFlagsExit2WithOneLine(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "user.creds")
	require.NoError(t, os.WriteFile(creds, []byte("not creds"), 0o600))
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"state updates":              {args: []string{"--state-updates", "some"}, want: "--state-updates"},
		"zero max nodes":             {args: []string{"--max-nodes", "0"}, want: "--max-nodes"},
		"negative max total flows":   {args: []string{"--max-total-flows", "-1"}, want: "--max-total-flows"},
		"zero kv window":             {args: []string{"--kv-window", "0"}, want: "--kv-window"},
		"negative metrics flows":     {args: []string{"--metrics-flows", "-1", "--metrics-addr", "127.0.0.1:0"}, want: "--metrics-flows"},
		"pprof without metrics":      {args: []string{"--pprof"}, want: "--metrics-addr"},
		"bad variable":               {env: map[string]string{"FLOWSTATE_MAX_NODES": "lots"}, want: "FLOWSTATE_MAX_NODES"},
		"all interfaces":             {args: []string{"--listen", ":4222"}, want: "--listen-insecure"},
		"non-loopback listen":        {args: []string{"--listen", "0.0.0.0:0"}, want: "--listen-insecure"},
		"comma alone":                {args: []string{"--nats-url", ","}, want: "empty entry"},
		"empty entry":                {args: []string{"--nats-url", "nats://127.0.0.1:4222,"}, want: "empty entry"},
		"http url":                   {args: []string{"--nats-url", "http://127.0.0.1:4222"}, want: "scheme"},
		"no host":                    {args: []string{"--nats-url", "nats://:4222"}, want: "no host"},
		"embedded and user":          {args: []string{"--nats-user", "u"}, env: map[string]string{"FLOWSTATE_NATS_PASSWORD": "p"}, want: "without --nats-url"},
		"embedded and creds":         {args: []string{"--nats-creds", creds}, want: "without --nats-url"},
		"embedded and token":         {env: map[string]string{"FLOWSTATE_NATS_TOKEN": "t"}, want: "without --nats-url"},
		"dead letter on heartbeats":  {args: []string{"--dead-letter-subject", "flow.heartbeat.5"}, want: "loop"},
		"dead letter on state":       {args: []string{"--dead-letter-subject", "flow.state"}, want: "loop"},
		"dead letter on get":         {args: []string{"--dead-letter-subject", "flow.state.get"}, want: "loop"},
		"dead letter on service":     {args: []string{"--dead-letter-subject", "$SRV.PING"}, want: "loop"},
		"dead letter on own prefix":  {args: []string{"--prefix", "a.b", "--dead-letter-subject", "a.b.heartbeat.x"}, want: "loop"},
		"token on the command line":  {args: []string{"--nats-token=secret"}, want: "FLOWSTATE_NATS_TOKEN"},
		"password without user":      {args: []string{"--nats-url", "nats://127.0.0.1:4222"}, env: map[string]string{"FLOWSTATE_NATS_PASSWORD": "p"}, want: "--nats-user"},
		"creds and nkey":             {args: []string{"--nats-url", "nats://127.0.0.1:4222", "--nats-creds", creds, "--nats-nkey", creds}, want: "exclusive"},
		"missing creds file":         {args: []string{"--nats-url", "nats://127.0.0.1:4222", "--nats-creds", filepath.Join(dir, "none")}, want: "--nats-creds"},
		"subcommand comma alone":     {args: []string{"get", "--nats-url", ","}, want: "empty entry"},
		"subcommand state of flags":  {args: []string{"watch", "--nats-url", "http://x:1"}, want: "scheme"},
		"subcommand missing creds":   {args: []string{"send", "--node", "1", "--nats-creds", filepath.Join(dir, "none")}, want: "--nats-creds"},
		"subcommand token on a flag": {args: []string{"get", "--nats-token=x"}, want: "FLOWSTATE_NATS_TOKEN"},
		"backend from a variable":    {env: map[string]string{"FLOWSTATE_KV": "jetsream"}, want: "--kv set by FLOWSTATE_KV"},
		"duration without a unit":    {args: []string{"--publish-interval", "100"}, want: "such as 100ms"},
		"variable without a unit":    {env: map[string]string{"FLOWSTATE_NODE_TTL": "30"}, want: "FLOWSTATE_NODE_TTL (the variable of --node-ttl): want a number with a unit, such as 100ms"},
		"subcommand duration":        {args: []string{"get", "--timeout", "5"}, want: "such as 100ms"},
		"replicas with memory":       {args: []string{"--kv-replicas", "3"}, want: "--kv-replicas: only --kv jetstream uses it"},
		"bucket with memory":         {env: map[string]string{"FLOWSTATE_KV_BUCKET": "b"}, want: "FLOWSTATE_KV_BUCKET (--kv-bucket): only --kv jetstream"},
		"url without a scheme":       {args: []string{"--nats-url", "127.0.0.1:4222"}, want: "has no scheme: write nats://127.0.0.1:4222"},
		"url credentials no scheme":  {args: []string{"--nats-url", "u:secret@h:4222"}, want: `"xxxxx@h:4222" has no scheme`},
		"full interval too short":    {args: []string{"--full-interval", "50ms"}, want: "shorter than --publish-interval 100ms"},
		"full interval with deltas":  {args: []string{"--full-interval", "5s", "--state-updates", "delta"}, want: "--state-updates delta"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, envOf(tc.env), tc.args...)
			assert.Equal(t, 2, code, stderr)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tc.want)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
			assert.Regexp(t, `\(see worker( \w+)? --help\)\n$`, stderr)
		})
	}
}

func TestListenInsecureAcceptsANonLoopbackListen(t *testing.T) {
	_, err := parseConfig([]string{"--listen", "0.0.0.0:0", "--listen-insecure"}, noEnv, io.Discard)
	require.NoError(t, err)
	for _, listen := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", "127.0.0.5:4222"} {
		_, err := parseConfig([]string{"--listen", listen}, noEnv, io.Discard)
		assert.NoError(t, err, listen)
	}
}

func TestDaemonHelpListsTheNewFlagsWithTheirVariables(t *testing.T) {
	code, stdout, stderr := runCLI(t, noEnv, "--help")
	require.Equal(t, 0, code)
	assert.Empty(t, stderr)
	for _, name := range []string{"max-nodes", "max-total-flows", "state-updates", "kv-window", "metrics-flows", "pprof", "listen-insecure", "full-interval"} {
		assert.Regexp(t, `(?m)^  --`+name+`\b.*\n\s+env `+envName(name)+` `, stdout, name)
	}
	assert.Contains(t, stdout, "env FLOWSTATE_NATS_TOKEN\n")
}

func TestMalformedCredentialsExit1BeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "user.creds")
	require.NoError(t, os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\nnot.a.jwt\n------END NATS USER JWT------\n"), 0o600))
	// Nothing listens on the URL: a worker that tried to connect would
	// retry for ever.
	url := "nats://127.0.0.1:" + itoa(freePort(t))
	code, _, stderr := runCLI(t, noEnv, "--nats-url", url, "--nats-creds", creds)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--nats-creds "+creds)
	code, _, stderr = runCLI(t, noEnv, "get", "--nats-url", url, "--nats-creds", creds)
	assert.Equal(t, 1, code)
	assert.Regexp(t, `^worker get: --nats-creds .*\n$`, stderr)
}

func TestTakenListenPortExits1AtOnceNamingTheAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()
	start := time.Now()
	code, _, stderr := runCLI(t, noEnv, "--listen", addr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, addr)
	t.Logf("exit after %v", time.Since(start))
}

func TestURLCredentialsAreWarnedRedacted(t *testing.T) {
	var logs bytes.Buffer
	m := &Main{}
	require.NoError(t, m.ParseFlags([]string{"--nats-url", "nats://ops:s3cret@127.0.0.1:4222,nats://127.0.0.1:4223"}, noEnv, io.Discard, &logs))
	m.warnings()
	assert.Contains(t, logs.String(), "nats://ops:xxxxx@127.0.0.1:4222")
	assert.NotContains(t, logs.String(), "s3cret")
	assert.Equal(t, 1, strings.Count(logs.String(), "\n"))
}

func TestListenInsecureIsWarned(t *testing.T) {
	var logs bytes.Buffer
	m := &Main{}
	require.NoError(t, m.ParseFlags([]string{"--listen", "0.0.0.0:0", "--listen-insecure"}, noEnv, io.Discard, &logs))
	m.warnings()
	assert.Contains(t, logs.String(), "no authentication")
}

func TestServerLogIsRateLimitedAndMapsSlowConsumersToWarnings(t *testing.T) {
	var logs bytes.Buffer
	l := newServerLog(slog.New(slog.NewTextHandler(&logs, nil)))
	l.Noticef("Server is ready")
	assert.Empty(t, logs.String(), "notices are debug lines")
	l.Noticef("%s - Slow Consumer Detected: WriteDeadline of %v exceeded", "cid:5", time.Second)
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), "component=nats-server")
	for range 1000 {
		l.Errorf("Maximum Payload Violation")
	}
	assert.LessOrEqual(t, strings.Count(logs.String(), "\n"), 2*serverLogBurst, "rate-limited")
	l.Fatalf("Error listening on port: %s", "taken")
	assert.Equal(t, "Error listening on port: taken", l.fatalMessage())
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestServingIsLoggedOnlyOnceConnected(t *testing.T) {
	port := freePort(t)
	logs := newLineWriter()
	m := &Main{}
	require.NoError(t, m.ParseFlags([]string{"--nats-url", "nats://127.0.0.1:" + itoa(port)}, noEnv, io.Discard, logs))
	require.NoError(t, m.Open())
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx, signals{log: m.Log}) }()
	defer func() {
		cancel()
		require.NoError(t, <-ran)
		cctx, ccancel := context.WithTimeout(context.Background(), cliWait)
		defer ccancel()
		assert.NoError(t, m.Close(cctx))
	}()

	// Not connected: the lines so far do not say serving; the first one
	// after the server is up says connected, then serving.
	for _, line := range drain(logs) {
		assert.NotContains(t, line, "msg=serving")
	}
	serverOnPort(t, port)
	for {
		line := logs.next(t)
		assert.NotContains(t, line, "msg=serving", "serving before connected")
		if strings.Contains(line, `msg="NATS connected"`) {
			break
		}
	}
	for !strings.Contains(logs.next(t), "msg=serving") {
	}
}

// drain returns the lines written so far.
func drain(w *lineWriter) []string {
	var lines []string
	for {
		select {
		case l := <-w.lines:
			lines = append(lines, l)
		default:
			return lines
		}
	}
}
