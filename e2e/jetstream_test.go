package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJetStreamWorkersShareOneState runs three workers on one bucket while
// 100 nodes report concurrently: every get, whichever worker answers it, is
// the exact aggregate of each node's last acked report, at one version;
// the bucket holds GreptimeDB's keys and values; one worker publishes.
func TestJetStreamWorkersShareOneState(t *testing.T) {
	t.Parallel()
	srv := startJetStreamServer(t)
	ws := startJSWorkers(t, srv.URL, 3, "--metrics-addr", "127.0.0.1:0")
	c := newClient(t, ws[0])
	u := c.subscribeUpdates()

	r := startReporters(t, c, 100, 20*time.Millisecond)
	r.awaitAcks(1000, 30*time.Second)
	r.stopAndWait()
	want := r.want()
	assert.Len(t, r.epochs(), 1, "one epoch for every ack")

	v := requireConverged(t, c, want, 30)
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	for id, n := range getStats(t, c.nc, ids) {
		assert.NotZero(t, n, "worker %s served gets", id)
	}

	// The bucket: GreptimeDB's keys, values in serde_json's form.
	_, kv := jsKV(t, c.nc)
	awaitKey(t, kv, jsStateKey, string(serdeJSON(want)))
	e, err := kv.Get(t.Context(), "__flow/state/node/7")
	require.NoError(t, err)
	assert.Equal(t, string(serdeJSON(r.last[7])), string(e.Value()))

	// One publisher: the last update is the state, and no other worker
	// published anything.
	got := u.until(v.Revision)
	last := got[len(got)-1]
	assert.Equal(t, v, last.version)
	assert.Equal(t, canonicalMsgpack(want), last.Body)
	for i := 1; i < len(got); i++ {
		assert.Greater(t, got[i].Revision, got[i-1].Revision, "updates in order")
	}
	publishers, leaseHolders := 0, 0
	for _, w := range ws {
		addr := w.waitStderr(metricsListening)[1]
		resp, err := (&http.Client{Timeout: requestTimeout}).Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		if publishesTotal(t, string(body)) > 0 {
			publishers++
		}
		if strings.Contains(string(body), "\nflowstate_publisher 1\n") {
			leaseHolders++
		}
		assert.Contains(t, string(body), "\nflowstate_store_available 1\n")
	}
	assert.Equal(t, 1, publishers, "workers that published")
	assert.Equal(t, 1, leaseHolders, "workers whose metrics say they hold the publisher lease")
	t.Logf("%d reports acked, %d retried %s, %d updates received", r.acked(), r.failed.Load(), r.failures(), len(got))
}

// TestJetStreamKilledWorkerLosesNothingAndKeepsEpoch kills one of three
// workers with SIGKILL while nodes report, and starts it again: no acked
// report is lost, every ack and get is in the one epoch, and the restarted
// worker serves the same state.
func TestJetStreamKilledWorkerLosesNothingAndKeepsEpoch(t *testing.T) {
	t.Parallel()
	srv := startJetStreamServer(t)
	ws := startJSWorkers(t, srv.URL, 3)
	c := newClient(t, ws[0])
	before := c.get()

	r := startReporters(t, c, 100, 20*time.Millisecond)
	r.awaitAcks(300, 30*time.Second)
	ws[1].Kill()
	r.awaitAcks(300, 30*time.Second)
	again := launchWorker(t, nil, "--nats-url", srv.URL, "--kv", "jetstream")
	again.awaitReady(ws[0].ID, ws[1].ID, ws[2].ID)
	r.awaitAcks(300, 30*time.Second)
	r.stopAndWait()

	epochs := r.epochs()
	assert.Equal(t, map[string]int{before.Epoch: r.acked()}, epochs, "every ack is in the epoch of before the kill")
	v := requireConverged(t, c, r.want(), 30)
	assert.Equal(t, before.Epoch, v.Epoch)
	stats := getStats(t, c.nc, []string{ws[0].ID, ws[2].ID, again.ID})
	assert.NotZero(t, stats[again.ID], "the restarted worker served gets")
	t.Logf("%d reports acked, %d retried %s", r.acked(), r.failed.Load(), r.failures())
}

// TestJetStreamWipedBucketStartsNewEpoch wipes the bucket under running
// workers, by a purge and by deleting it: each time the state starts over
// empty at revision 0 in a new epoch, and reports go on in it.
func TestJetStreamWipedBucketStartsNewEpoch(t *testing.T) {
	t.Parallel()
	srv := startJetStreamServer(t)
	ws := startJSWorkers(t, srv.URL, 2)
	c := newClient(t, ws[0])
	js, _ := jsKV(t, c.nc)
	s := lastExec(map[uint32]int64{1: 100})
	first := c.report(1, codecReport(1, s))

	seen := map[string]bool{first.Epoch: true}
	for _, wipe := range []struct {
		how string
		do  func()
	}{
		{"stream purged", func() {
			stream, err := js.Stream(t.Context(), "KV_"+jsBucket)
			require.NoError(t, err)
			require.NoError(t, stream.Purge(t.Context()))
		}},
		{"bucket deleted", func() { require.NoError(t, js.DeleteKeyValue(t.Context(), jsBucket)) }},
	} {
		last := c.get()
		wipe.do()
		m := awaitEpochChange(t, c, last.Epoch, 3*startTimeout)
		assert.False(t, seen[m.Epoch], "%s: a new epoch", wipe.how)
		seen[m.Epoch] = true
		assert.Zero(t, m.Revision, "%s: revision", wipe.how)
		assert.Equal(t, unhex(t, hexEmptyValue), m.Body, "%s: empty state", wipe.how)
		awaitEveryWorkerAt(t, c, m.version, startTimeout, wipe.how)

		var ack version
		require.Eventually(t, func() bool {
			msg, err := c.nc.Request(c.heartbeatSubject(2), codecReport(2, s), requestTimeout)
			if err != nil || msg.Header.Get(hdrEpoch) == "" {
				return false
			}
			ack = parseVersion(t, msg.Header)
			return true
		}, startTimeout, 50*time.Millisecond, "%s: a report is acked again", wipe.how)
		assert.Equal(t, m.Epoch, ack.Epoch, "%s: the ack is in the new epoch", wipe.how)
		c.requireState(s)
	}
	_, err := js.KeyValue(t.Context(), jsBucket)
	assert.NoError(t, err, "the workers recreated the bucket")
}

// TestJetStreamBucketSettingsAreChecked requires a clear start-up error for
// a bucket whose settings differ from the flags, and exit status 2 for
// invalid JetStream flags.
func TestJetStreamBucketSettingsAreChecked(t *testing.T) {
	t.Parallel()
	srv := startJetStreamServer(t)
	nc := connect(t, srv.URL)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "filed", Storage: jetstream.FileStorage})
	require.NoError(t, err)

	code, _, stderr := runToExit(t, nil, "--nats-url", srv.URL, "--kv", "jetstream", "--kv-bucket", "filed")
	assert.Equal(t, 1, code, "exit code; stderr:\n%s", stderr)
	assert.Regexp(t, regexp.MustCompile(`bucket \\?"filed\\?" has 1 replicas and file storage, not 1 replicas and memory storage.*--kv-storage`), stderr)

	w := startWorker(t, srv.URL, "--kv", "jetstream", "--kv-bucket", "filed", "--kv-storage", "file")
	newClient(t, w).report(1, codecReport(1, lastExec(map[uint32]int64{1: 1})))

	for _, args := range [][]string{
		{"--kv", "jetstream"}, // no --nats-url: the embedded server has no JetStream
		{"--nats-url", srv.URL, "--kv", "jetstream", "--kv-storage", "disk"},
		{"--nats-url", srv.URL, "--kv", "jetstream", "--kv-replicas", "0"},
		{"--nats-url", srv.URL, "--kv", "jetstream", "--kv-replicas", "7"},
		{"--nats-url", srv.URL, "--kv", "jetstream", "--kv-bucket", "a.b"},
	} {
		code, _, stderr := runToExit(t, nil, args...)
		assert.Equal(t, 2, code, "%v: exit code; stderr:\n%s", args, stderr)
		assert.Contains(t, stderr, "--kv", "%v", args)
	}
}
