package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate"
	"github.com/flowstate-io/flowstate/codec"
	fs "github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/binaries"
	"github.com/flowstate-io/flowstate/protocol"
)

// The version skew policy of docs/operating.md, tested: the previous
// release, built from the commit CHANGELOG.md names for it, runs beside
// this one on one JetStream bucket and one queue group.

// Environment of the skew test.
const (
	// skewRoundsEnv sets the rounds of reports each phase sends (default
	// skewRounds; `make skew` runs a long form).
	skewRoundsEnv = "FLOWSTATE_SKEW_ROUNDS"
	// skewMutationEnv names a fault built into the previous release's
	// worker, to show that the test fails on it: "split" makes it treat a
	// node value that carries seq (one this release wrote) as no value, so
	// that its state parts from this release's at the same revision.
	skewMutationEnv = "FLOWSTATE_SKEW_MUTATION"
)

// skewRounds is the short form's rounds per phase: 6 nodes, 4 phases, 120
// reports and as many gets.
const skewRounds = 5

// skewNodeEpoch is the process (node_epoch) of every numbered node.
const skewNodeEpoch = 1700000000000

// staleProbes is how many times a phase resends a numbered node's older
// report.
const staleProbes = 8

// release is a release named by CHANGELOG.md.
type release struct {
	version string
	commit  string
}

// changelogRelease is a release section whose first line names its commit.
var changelogRelease = regexp.MustCompile("(?m)^## \\[(0\\.(\\d+)\\.\\d+)\\] - \\d{4}-\\d{2}-\\d{2}\n\nReleased from: ([0-9a-f]{40}),")

// previousRelease is the newest release of the previous minor version that
// CHANGELOG.md names with its commit.
func previousRelease(t testing.TB, root string) release {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	require.NoError(t, err)
	cur := strings.Split(flowstate.Version(), ".")
	minor, err := strconv.Atoi(cur[1])
	require.NoError(t, err)
	for _, m := range changelogRelease.FindAllStringSubmatch(string(b), -1) {
		if m[2] == strconv.Itoa(minor-1) {
			return release{version: m[1], commit: m[3]}
		}
	}
	t.Fatalf("CHANGELOG.md names no release 0.%d.x with its commit (\"Released from: <40 hex digits>,\")", minor-1)
	return release{}
}

// previousBuild is the previous release's worker, built once per run.
var previousBuild struct {
	once sync.Once
	rel  release
	path string
	skip string // why the history cannot give it
	err  error
}

// previousWorker returns the path of the previous release's worker, built
// from the repository's own history. It skips, saying why, when the
// history does not hold the release's commit (a shallow clone: `git fetch
// --unshallow`, which .ci/run does).
func previousWorker(t testing.TB) (string, release) {
	t.Helper()
	b := &previousBuild
	b.once.Do(func() {
		root, err := binaries.ModuleRoot()
		if err != nil {
			b.err = err
			return
		}
		b.rel = previousRelease(t, root)
		if _, err := exec.LookPath("git"); err != nil {
			b.skip = "git is not installed: the previous release cannot be built from the history"
			return
		}
		git := func(args ...string) ([]byte, error) {
			cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				err = fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
			}
			return out, err
		}
		if _, err := git("rev-parse", "--git-dir"); err != nil {
			b.skip = "not a git clone, so no history to build the previous release from: " + err.Error()
			return
		}
		if _, err := git("cat-file", "-e", b.rel.commit+"^{commit}"); err != nil {
			shallow, _ := git("rev-parse", "--is-shallow-repository")
			b.skip = fmt.Sprintf("the history lacks %s, the commit of release %s that CHANGELOG.md names (shallow clone: %s); "+
				"run git fetch --unshallow, as .ci/run does", b.rel.commit, b.rel.version, strings.TrimSpace(string(shallow)))
			return
		}
		dir := filepath.Join(filepath.Dir(bin.natsServer), "worker-"+b.rel.version)
		src := filepath.Join(dir, "src")
		archive, err := git("archive", "--format=tar", b.rel.commit)
		if err != nil {
			b.err = err
			return
		}
		if b.err = untar(archive, src); b.err != nil {
			return
		}
		if m := os.Getenv(skewMutationEnv); m != "" {
			if b.err = mutatePrevious(src, m); b.err != nil {
				return
			}
		}
		b.path = filepath.Join(dir, "worker")
		if err := goBuildModule(src, b.path, "./cmd/worker"); err != nil {
			b.err = fmt.Errorf("the worker of %s (%s): %w", b.rel.version, b.rel.commit, err)
		}
	})
	if b.skip != "" {
		t.Skip(b.skip)
	}
	require.NoError(t, b.err)
	return b.path, b.rel
}

// untar writes the files of a tar archive (git archive's) under dir.
func untar(archive []byte, dir string) error {
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || strings.HasPrefix(name, "..") {
			return fmt.Errorf("archive entry %q leaves the directory", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var f *os.File
				if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o600); err == nil {
					_, err = io.Copy(f, tr)
					err = errors.Join(err, f.Close())
				}
			}
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.Symlink(h.Linkname, p)
			}
		}
		if err != nil {
			return err
		}
	}
}

// mutatePrevious builds a fault into the previous release's source (see
// skewMutationEnv).
func mutatePrevious(src, mutation string) error {
	if mutation != "split" {
		return fmt.Errorf("%s=%q: the only mutation is split", skewMutationEnv, mutation)
	}
	p := filepath.Join(src, "state", "replica.go")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	const at = "\tif limit := r.opts.MaxReportFlows; limit > 0 && len(w.flows) > limit {"
	const fault = "\tif own == nil && strings.Contains(string(ev.Value), `\"seq\":`) {\n" +
		"\t\tr.refuseLocked(RefusedInvalid, ev, fmt.Errorf(\"a field this release does not know\"))\n" +
		"\t\treturn nil, false\n\t}\n"
	if !bytes.Contains(b, []byte(at)) {
		return fmt.Errorf("mutation split: %s no longer has %q", p, at)
	}
	return os.WriteFile(p, bytes.Replace(b, []byte(at), []byte(fault+at), 1), 0o644)
}

// skew drives the workers of two releases on one bucket and checks every
// answer as it comes.
type skew struct {
	t       *testing.T
	url     string
	c       *client
	ids     []string // every worker started, for awaitReady
	phase   string
	k       map[uint64]int       // the next round of each node
	reports map[uint64][][]byte  // each node's acked report bodies, by round
	values  map[uint64]flowState // the report of each node the state must hold
	seen    map[version]flowState
	epoch   string  // the one epoch of the test
	lastAck version // the latest acknowledged version
	gets    int
	acks    int
	unnumbered,
	numbered []uint64
}

func newSkew(t *testing.T, url string) *skew {
	return &skew{t: t, url: url, k: map[uint64]int{}, reports: map[uint64][][]byte{},
		values: map[uint64]flowState{}, seen: map[version]flowState{},
		unnumbered: []uint64{1, 2, 3}, numbered: []uint64{11, 12, 13}}
}

// start runs the worker at path on the bucket and waits until it serves.
func (s *skew) start(path string) *workerProc {
	s.t.Helper()
	w := launchWorkerBinary(s.t, path, nil, "--nats-url", s.url, "--kv", "jetstream")
	w.awaitReady(s.ids...)
	s.ids = append(s.ids, w.ID)
	if s.c == nil {
		s.c = newClient(s.t, w)
	}
	return w
}

// stop stops w as a rolling update does (SIGTERM), requiring a clean exit.
func (s *skew) stop(w *workerProc) {
	s.t.Helper()
	require.Equal(s.t, 0, w.Stop(), "%s: exit code of a stopped worker; stderr:\n%s", s.phase, w.Stderr())
}

// report is round k of node: unnumbered nodes send node_epoch alone (as v2
// flownodes do), numbered ones seq k+1 of process skewNodeEpoch and the
// rows each flow processed.
func (s *skew) report(node uint64, k int) []byte {
	v := nodeReport(node, k)
	r := &codec.Report{NodeID: node, NodeEpoch: skewNodeEpoch, HasNodeEpoch: true, Flows: v.value().Flows()}
	if node >= 10 {
		r.Health = fs.Health{HasSeq: true, Seq: uint64(k) + 1, HasProcessedRows: true}
		for _, f := range r.Flows { // sorted by flow id, as Health wants
			r.Health.Flows = append(r.Health.Flows, fs.FlowHealth{ID: f.ID, Has: fs.HasProcessedRows, ProcessedRows: uint64(k) * 10})
		}
	}
	return codec.AppendReport(nil, r)
}

// send sends node's next report until it is acked: a 503 or a timeout is
// sent again as a flownode's next heartbeat would; a numbered report
// answered 409 after a timeout was applied by the request that timed out.
func (s *skew) send(node uint64) {
	s.t.Helper()
	k := s.k[node]
	s.k[node]++
	body := s.report(node, k)
	timedOut := false
	for attempt := 0; ; attempt++ {
		require.Less(s.t, attempt, 100, "%s: node %d round %d never acked", s.phase, node, k)
		msg, err := s.c.nc.Request(s.c.heartbeatSubject(node), body, requestTimeout)
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
			timedOut = true
			time.Sleep(50 * time.Millisecond)
			continue
		}
		require.NoError(s.t, err)
		switch code := msg.Header.Get(micro.ErrorCodeHeader); {
		case code == "503":
			time.Sleep(50 * time.Millisecond)
			continue
		case code == "409" && node >= 10 && timedOut:
		default:
			s.acked(requireAck(s.t, msg))
		}
		s.reports[node] = append(s.reports[node], body)
		s.values[node] = nodeReport(node, k)
		return
	}
}

// acked checks an acknowledgement's version: the test's one epoch, and a
// revision no lower than the last ack's (acks are sequential here).
func (s *skew) acked(v version) {
	s.t.Helper()
	s.acks++
	if s.epoch == "" {
		s.epoch = v.Epoch
	}
	require.Equal(s.t, s.epoch, v.Epoch, "%s: an ack in another epoch: the releases started the state over", s.phase)
	require.GreaterOrEqual(s.t, v.Revision, s.lastAck.Revision, "%s: an ack below an earlier one", s.phase)
	s.lastAck = v
}

// get gets the state from whichever worker the queue group picks (a 503
// asked again) and requires one state per version, in the test's one
// epoch, no older than the last acknowledged report. It returns the
// version.
func (s *skew) get() version {
	s.t.Helper()
	for attempt := 0; ; attempt++ {
		require.Less(s.t, attempt, 100, "%s: no get answered", s.phase)
		msg, err := s.c.nc.Request(s.c.prefix+".state.get", nil, requestTimeout)
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
			continue
		}
		require.NoError(s.t, err)
		if msg.Header.Get(micro.ErrorCodeHeader) == "503" {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		m := parseAggregateMsg(s.t, msg)
		got := decodeAggregate(s.t, m.Body)
		s.gets++
		require.Equal(s.t, s.epoch, m.Epoch, "%s: a get in another epoch", s.phase)
		require.GreaterOrEqual(s.t, m.Revision, s.lastAck.Revision, "%s: a get older than an acknowledged report", s.phase)
		if prev, ok := s.seen[m.version]; ok {
			require.Equal(s.t, prev, got, "%s: two states at epoch %s revision %d", s.phase, m.Epoch, m.Revision)
		}
		s.seen[m.version] = got
		return m.version
	}
}

// traffic sends rounds reports of every node, each followed by two gets,
// so that many versions are shown by both workers of a mixed phase.
func (s *skew) traffic(rounds int) {
	s.t.Helper()
	for range rounds {
		for _, node := range append(append([]uint64(nil), s.unnumbered...), s.numbered...) {
			s.send(node)
			s.get()
			s.get()
		}
	}
}

// probeStale resends staleProbes times a numbered node's report of two
// rounds ago and counts the answers: acks (a worker without the stale rule
// applied it, and the state holds it until the node's next report) and 409s.
// Anything else fails the test. The node's next report follows.
func (s *skew) probeStale(node uint64) (acked, refused int) {
	s.t.Helper()
	k := s.k[node] - 2
	require.GreaterOrEqual(s.t, k, 0)
	old := s.reports[node][k]
	for range staleProbes {
		msg := s.c.request(s.c.heartbeatSubject(node), old, nil)
		for retry := 0; msg.Header.Get(micro.ErrorCodeHeader) == "503"; retry++ {
			// The previous release answers 503 when the key was written
			// by another worker since its watch last saw it.
			require.Less(s.t, retry, 100, "%s: node %d: a resent report answered 503 every time", s.phase, node)
			time.Sleep(50 * time.Millisecond)
			msg = s.c.request(s.c.heartbeatSubject(node), old, nil)
		}
		switch code := msg.Header.Get(micro.ErrorCodeHeader); code {
		case "":
			s.acked(requireAck(s.t, msg))
			s.values[node] = nodeReport(node, k) // the exception the policy names
			acked++
		case "409":
			refused++
		default:
			require.Failf(s.t, "a stale report answered neither an ack nor 409", "%s: node %d seq %d: %s %s",
				s.phase, node, k+1, code, msg.Header.Get(micro.ErrorHeader))
		}
		s.get()
	}
	s.send(node)
	s.get()
	return acked, refused
}

// converged requires ten gets in a row, from whichever workers answer, to
// show the aggregate of each node's last acknowledged report: after the
// acks, a worker's read barrier holds its get until it has applied them.
func (s *skew) converged() {
	s.t.Helper()
	want := aggregateOf(s.values).normalized()
	for i := range 10 {
		v := s.get()
		require.Equal(s.t, want, s.seen[v], "%s: get %d of the phase's last ten (epoch %s revision %d) is not the aggregate of every node's last acknowledged report",
			s.phase, i, v.Epoch, v.Revision)
	}
}

// stats gets the stats view (protocol v3) in JSON, asked again on a 503.
func (s *skew) stats() (*nats.Msg, version) {
	s.t.Helper()
	h := nats.Header{protocol.HeaderView: []string{protocol.ViewStats}, hdrAccept: []string{contentJSON}}
	for attempt := 0; ; attempt++ {
		require.Less(s.t, attempt, 100, "%s: no stats get answered", s.phase)
		msg := s.c.request(s.c.prefix+".state.get", nil, h)
		if msg.Header.Get(micro.ErrorCodeHeader) == "503" {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		return msg, parseAggregateMsg(s.t, msg).version
	}
}

// processedRows is what the stats view says each flow processed, and
// whether it has the field at all.
func processedRows(t testing.TB, body []byte) (map[string]uint64, bool) {
	t.Helper()
	var v struct {
		ProcessedRows *map[string]uint64 `json:"processed_rows"`
	}
	require.NoError(t, json.Unmarshal(body, &v), "%s", body)
	if v.ProcessedRows == nil {
		return nil, false
	}
	return *v.ProcessedRows, true
}

func TestVersionSkewPreviousReleaseBesideThisOne(t *testing.T) {
	oldBin, rel := previousWorker(t)
	rounds := skewRounds
	if v := os.Getenv(skewRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, skewRoundsEnv)
		rounds = n
	}
	t.Logf("previous release %s (%s) beside %s, %d rounds a phase", rel.version, rel.commit, flowstate.Version(), rounds)
	s := newSkew(t, startJetStreamServer(t).URL)

	// The previous release alone, as before the upgrade: it has no stale
	// rule, so it applies every older report.
	s.phase = "previous release"
	o1, o2 := s.start(oldBin), s.start(oldBin)
	s.traffic(rounds)
	acked, refused := s.probeStale(s.numbered[0])
	assert.Equal(t, staleProbes, acked, "%s: resent older reports applied", s.phase)
	assert.Zero(t, refused, s.phase)
	s.converged()

	// A rolling update half done: one worker of each release on the bucket
	// and in the queue group. An older report is refused by this release
	// and applied by the previous one, whichever the group picks.
	s.phase = "rolling update"
	n1 := s.start(bin.worker)
	s.stop(o1)
	s.traffic(rounds)
	acked, refused = s.probeStale(s.numbered[1])
	t.Logf("%s: of %d older reports resent, %d applied (by the previous release, or by this one on a value the previous release wrote), %d refused (409)",
		s.phase, staleProbes, acked, refused)
	s.converged()

	// Rolled back: the previous release alone again, on what this one wrote.
	s.phase = "rollback"
	o3 := s.start(oldBin)
	s.stop(n1)
	s.traffic(rounds)
	acked, refused = s.probeStale(s.numbered[2])
	assert.Equal(t, staleProbes, acked, "%s: resent older reports applied", s.phase)
	assert.Zero(t, refused, s.phase)
	s.converged()
	// A client of protocol v3 that asks the previous release for the stats
	// view gets the seed's view: the header is unknown to it.
	msg, v := s.stats()
	require.Contains(t, s.seen, v, "%s: a stats get at a version no get showed", s.phase)
	_, has := processedRows(t, msg.Data)
	assert.False(t, has, "%s: the previous release answered a stats view", s.phase)
	assert.JSONEq(t, string(serdeJSON(s.seen[v])), string(msg.Data), "%s: the previous release's answer to a stats get is the seed's view", s.phase)

	// Rolled forward: this release alone. The first numbered report of a
	// node after the previous release wrote it is taken whatever its seq
	// (that value carries none); from then on an older one is refused.
	s.phase = "roll forward"
	s.start(bin.worker)
	s.stop(o2)
	s.start(bin.worker)
	s.stop(o3)
	s.traffic(rounds)
	for _, node := range s.numbered {
		acked, refused = s.probeStale(node)
		assert.Zero(t, acked, "%s: node %d: an older report applied by this release", s.phase, node)
		assert.Equal(t, staleProbes, refused, "%s: node %d: older reports refused", s.phase, node)
	}
	s.converged()
	// The stats view is whole again: each numbered node's flows show the
	// rows of its last report.
	msg, _ = s.stats()
	rows, has := processedRows(t, msg.Data)
	require.True(t, has, "%s: a stats view without processed_rows: %s", s.phase, msg.Data)
	for _, node := range s.numbered {
		k := s.k[node] - 1
		for id := range nodeReport(node, k).StateSize {
			assert.Equal(t, uint64(k)*10, rows[strconv.FormatUint(uint64(id), 10)], "%s: node %d flow %d processed rows", s.phase, node, id)
		}
	}
	t.Logf("%d acks, %d gets, %d versions seen, one state each", s.acks, s.gets, len(s.seen))
}
