package main

import (
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate"
)

// stamp sets what the Makefile stamps with -ldflags for the test's span.
func stamp(t *testing.T, c, m string) {
	oldC, oldM := commit, modified
	commit, modified = c, m
	t.Cleanup(func() { commit, modified = oldC, oldM })
}

func TestVersionPrintsTheReleaseCommitAndGoVersion(t *testing.T) {
	// A test binary carries no VCS stamp of the go command (go test does
	// not record one), so the commit is the Makefile's, or unknown.
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name, commit, modified, want string
	}{
		{"unstamped", "", "", "flowstate worker " + flowstate.Version() + "\ncommit:   unknown\nmodified: false\ngo:       " + runtime.Version() + " " + platform + "\n"},
		{"stamped", "60a15166f94712ecd491198495d895424f4e61ba", "true", "flowstate worker " + flowstate.Version() + "\ncommit:   60a15166f94712ecd491198495d895424f4e61ba\nmodified: true\ngo:       " + runtime.Version() + " " + platform + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stamp(t, tc.commit, tc.modified)
			for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}, {"--nats-url", "nats://127.0.0.1:1", "--version"}} {
				code, stdout, stderr := runCLI(t, noEnv, args...)
				assert.Equal(t, 0, code, "%v", args)
				assert.Empty(t, stderr, "%v", args)
				assert.Equal(t, tc.want, stdout, "%v", args)
			}
		})
	}
	code, _, stderr := runCLI(t, noEnv, "version", "extra")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `worker version: unexpected argument "extra"`)
	code, stdout, _ := runCLI(t, noEnv, "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "--version")
	assert.Regexp(t, `\n  version +\S`, stdout, "worker --help names the version subcommand")
}

func TestBuildInfoMetricAndServiceCarryTheVersion(t *testing.T) {
	stamp(t, "0123456789abcdef0123456789abcdef01234567", "false")
	port := freePort(t)
	serverOnPort(t, port)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	m, _ := startMain(t, "--nats-url", url, "--metrics-addr", "127.0.0.1:0")

	code, body := scrape(t, m.metricsAddr, "/metrics")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `flowstate_build_info{commit="0123456789abcdef0123456789abcdef01234567",goversion="`+
		runtime.Version()+`",modified="false",version="`+flowstate.Version()+`"} 1`+"\n")

	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	msg, err := nc.Request("$SRV.INFO.flowstate", nil, 5*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(msg.Data, &info))
	assert.Equal(t, flowstate.Version(), info.Version, "the micro service's version")
}
