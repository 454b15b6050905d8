package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// jsDir holds the JavaScript conformance client, relative to this package.
const jsDir = "js"

// npmInstallArgs installs the client's npm packages at the versions of
// js/package.json, without writing a package-lock.json (it would record
// registry URLs).
var npmInstallArgs = []string{"install", "--no-package-lock", "--no-audit", "--no-fund"}

// Bounds of the JavaScript client's steps.
const (
	npmInstallTimeout = 3 * time.Minute
	jsRunTimeout      = 5 * time.Minute
)

// jsSummary matches the client's last line.
var jsSummary = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed$`)

// TestJavaScriptClientConforms runs js/conformance.mjs, a client written
// from PROTOCOL.md alone in JavaScript with the npm packages nats and
// @msgpack/msgpack, against a fresh worker with the default flags, and
// requires every one of its checks to pass. Its output goes to the test log,
// one line per check.
func TestJavaScriptClientConforms(t *testing.T) {
	t.Parallel()
	node := requireJSClient(t)
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--prefix", "jsconf")

	ctx, cancel := context.WithTimeout(t.Context(), jsRunTimeout)
	defer cancel()
	run := startJS(t, ctx, node, "conformance.mjs", w.URL, w.Prefix)
	require.Positive(t, run.passed(t), "conformance.mjs ran no check")
}

// jsRun is a script of js/ running under node.
type jsRun struct {
	ctx    context.Context
	script string
	stdin  io.WriteCloser
	stdout *signalLogger // each line also on stdout.lines
	stderr *lineLogger
	ended  chan struct{} // closed once the script has ended and its output is logged
	err    error         // its exit error, once ended
}

// startJS starts node on script with args in js/, bounded by ctx, with a
// pipe to its standard input; each line it writes goes to the test log.
// Cleanup kills the script if it still runs, and waits for it.
func startJS(t *testing.T, ctx context.Context, node, script string, args ...string) *jsRun {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = jsDir
	cmd.Env = cleanEnv()
	cmd.WaitDelay = stopTimeout
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	r := &jsRun{ctx: ctx, script: script, stdin: stdin,
		stdout: &signalLogger{lineLogger: lineLogger{t: t}, lines: make(chan string, 100)},
		stderr: &lineLogger{t: t, prefix: "stderr: "}, ended: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.stdout, r.stderr
	require.NoError(t, cmd.Start(), "start %s", script)
	go func() {
		r.err = cmd.Wait()
		close(r.ended)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // an error: it has ended already
		<-r.ended
	})
	return r
}

// done is closed once the script has ended and its output is logged.
func (r *jsRun) done() <-chan struct{} { return r.ended }

// passed waits for the script to end, requires that it passed every check
// within its bound, and returns how many it ran.
func (r *jsRun) passed(t *testing.T) int {
	t.Helper()
	<-r.ended
	out := r.stdout.close()
	r.stderr.close()
	return requireJSPassed(t, r.ctx, r.script, out, r.err)
}

// signalLogger is a lineLogger that also hands each line to lines, unless
// lines is full.
type signalLogger struct {
	lineLogger
	mu    sync.Mutex // guards part
	part  []byte
	lines chan string
}

func (l *signalLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		select {
		case l.lines <- string(l.part[:i]):
		default: // nobody waits for it
		}
		l.part = l.part[i+1:]
	}
	return l.lineLogger.Write(p)
}

// requireJSPassed requires that script ended within ctx, without error, on
// a "N passed, 0 failed" line, and returns N.
func requireJSPassed(t *testing.T, ctx context.Context, script, out string, err error) int {
	t.Helper()
	require.NoError(t, ctx.Err(), "%s did not finish within %v", script, jsRunTimeout)
	require.NoError(t, err, "%s failed: see its FAIL lines above", script)
	m := jsSummary.FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, m, `%s printed no "N passed, N failed" line`, script)
	last := m[len(m)-1]
	passed, _ := strconv.Atoi(last[1])
	require.Equal(t, "0", last[2], "failed checks")
	return passed
}

// requireJSClient returns the path of node, after installing the client's
// npm packages if node_modules lacks them or holds other versions. It fails
// the test, with what to do, when node or npm is missing or the install
// fails: the conformance client is part of `make test`, never skipped.
func requireJSClient(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is not on PATH: the JavaScript conformance client (e2e/js) needs Node.js 20 and npm; install them and run `make test`, which installs its npm packages")
	missing, err := jsPackagesMissing()
	require.NoError(t, err, "e2e/js/package.json")
	if len(missing) == 0 {
		return node
	}
	npm, err := exec.LookPath("npm")
	require.NoError(t, err, "e2e/js/node_modules lacks %s and npm is not on PATH: install npm and run `make test`, which installs the npm packages of e2e/js", strings.Join(missing, ", "))
	t.Logf("e2e/js/node_modules lacks %s: running npm %s", strings.Join(missing, ", "), strings.Join(npmInstallArgs, " "))
	ctx, cancel := context.WithTimeout(t.Context(), npmInstallTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, npmInstallArgs...)
	cmd.Dir = jsDir
	cmd.WaitDelay = stopTimeout
	b, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "npm install in e2e/js did not finish within %v; run `make test`, which installs the npm packages of e2e/js; output:\n%s", npmInstallTimeout, b)
	require.NoError(t, err, "npm install in e2e/js failed; run `make test`, which installs the npm packages of e2e/js; output:\n%s", b)
	missing, err = jsPackagesMissing()
	require.NoError(t, err, "e2e/js/package.json")
	require.Empty(t, missing, "npm install in e2e/js left packages missing; output:\n%s", b)
	return node
}

// jsPackagesMissing returns the dependencies of js/package.json that
// js/node_modules lacks or holds at another version, as name@version.
func jsPackagesMissing() ([]string, error) {
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join(jsDir, "package.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return nil, err
	}
	if len(pkg.Dependencies) == 0 {
		return nil, errors.New("no dependencies")
	}
	var missing []string
	for name, want := range pkg.Dependencies {
		var installed struct {
			Version string `json:"version"`
		}
		b, err := os.ReadFile(filepath.Join(jsDir, "node_modules", filepath.FromSlash(name), "package.json"))
		if err != nil || json.Unmarshal(b, &installed) != nil || installed.Version != want {
			missing = append(missing, name+"@"+want)
		}
	}
	slices.Sort(missing)
	return missing, nil
}

// lineLogger writes each complete line to the test log as it arrives, and
// keeps everything written. It is safe for concurrent use.
type lineLogger struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex // guards all and part
	all    bytes.Buffer
	part   []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		l.t.Log(l.prefix + string(l.part[:i]))
		l.part = l.part[i+1:]
	}
	return len(p), nil
}

// close logs an unterminated last line and returns everything written.
func (l *lineLogger) close() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.part) > 0 {
		l.t.Log(l.prefix + string(l.part))
		l.part = nil
	}
	return l.all.String()
}
