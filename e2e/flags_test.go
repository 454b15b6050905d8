package e2e

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runToExit runs the worker with env added to the cleaned environment and
// requires it to exit by itself within startTimeout.
func runToExit(t testing.TB, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startProcess(t, "worker", bin.worker, append(cleanEnv(), env...), args...)
	code, ok := p.wait(startTimeout)
	if !ok {
		p.terminate(stopTimeout)
		require.Failf(t, "worker did not exit", "args %q env %q; stderr:\n%s", args, env, p.stderr.String())
	}
	return code, p.stdout.String(), p.stderr.String()
}

// TestBadFlagExitsTwoWithOneLine requires exit status 2 and exactly one
// line on stderr for each bad flag, value or variable.
func TestBadFlagExitsTwoWithOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		outcome string
		args    []string
		env     []string
	}{
		{"duration that does not parse", []string{"--publish-interval", "nope"}, nil},
		{"negative publish interval", []string{"--publish-interval", "-1s"}, nil},
		{"negative max flows", []string{"--max-flows", "-1"}, nil},
		{"max flows that is not a number", []string{"--max-flows", "many"}, nil},
		{"unknown state backend", []string{"--kv", "nosuch"}, nil},
		{"unknown flag", []string{"--no-such-flag"}, nil},
		{"stray argument", []string{"stray"}, nil},
		{"prefix with a wildcard", []string{"--prefix", "flow.*"}, nil},
		{"prefix with a space", []string{"--prefix", "my flow"}, nil},
		{"listen address without a port", []string{"--listen", "127.0.0.1"}, nil},
		{"invalid FLOWSTATE_MAX_FLOWS", nil, []string{"FLOWSTATE_MAX_FLOWS=abc"}},
		{"invalid FLOWSTATE_PUBLISH_INTERVAL", nil, []string{"FLOWSTATE_PUBLISH_INTERVAL=soon"}},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			t.Parallel()
			// A port-0 listen first, so that a wrongly accepted command line
			// cannot take port 4222.
			args := append([]string{"--listen", "127.0.0.1:0"}, tc.args...)
			code, stdout, stderr := runToExit(t, tc.env, args...)
			assert.Equal(t, 2, code, "exit status; stderr:\n%s", stderr)
			assert.NotEmpty(t, strings.TrimSpace(stderr), "a reason on stderr")
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "exactly one line on stderr: %q", stderr)
			assert.True(t, strings.HasSuffix(stderr, "\n"), "stderr ends its line: %q", stderr)
			assert.Empty(t, stdout)
		})
	}
}

// TestHelpPrintsUsageAndExitsZero requires --help (and -h) to print the
// usage on stdout, nothing on stderr, and exit 0.
func TestHelpPrintsUsageAndExitsZero(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h"} {
		code, stdout, stderr := runToExit(t, nil, arg)
		assert.Equal(t, 0, code, arg)
		assert.Empty(t, stderr, arg)
		assert.Equal(t, 1, strings.Count(stdout, "Usage:"), "usage printed once by %s", arg)
		for _, flag := range []string{"--nats-url", "--listen", "--prefix", "--queue", "--publish-interval", "--max-flows", "--metrics-addr", "--kv", "--kv-bucket", "--kv-replicas", "--kv-storage", "--node-ttl", "--dead-letter-subject", "--nats-creds", "--nats-nkey", "--nats-user", "--nats-token", "--tls-ca", "--tls-cert", "--tls-key", "--log-level"} {
			assert.Contains(t, stdout, flag, "usage printed by %s", arg)
		}
	}
}

// TestFlagWinsOverEnvironment sets FLOWSTATE_PREFIX and --prefix and
// requires the worker to serve on the flag's prefix only; with the variable
// alone it serves on the variable's.
func TestFlagWinsOverEnvironment(t *testing.T) {
	t.Parallel()
	srv := startServer(t)

	w := startWorkerEnv(t, []string{"FLOWSTATE_PREFIX=fromenv"}, "--nats-url", srv.URL, "--prefix", "fromflag")
	require.Equal(t, "fromflag", w.Prefix)
	c := newClient(t, w)
	c.report(1, codecReport(1, lastExec(map[uint32]int64{1: 1})))
	c.requireState(lastExec(map[uint32]int64{1: 1}))
	_, err := c.nc.Request("fromenv.state.get", nil, requestTimeout)
	assert.True(t, errors.Is(err, nats.ErrNoResponders), "nothing serves the variable's prefix: %v", err)
	require.Equal(t, 0, w.Stop())

	w = startWorkerEnv(t, []string{"FLOWSTATE_PREFIX=fromenv", "FLOWSTATE_NATS_URL=" + srv.URL})
	require.Equal(t, "fromenv", w.Prefix)
	c = newClient(t, w)
	c.report(2, codecReport(2, lastExec(map[uint32]int64{2: 2})))
	c.requireState(lastExec(map[uint32]int64{2: 2}))
}
