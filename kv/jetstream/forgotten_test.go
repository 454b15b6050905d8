package jetstream_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/kv/jetstream"
	"github.com/flowstate-io/flowstate/kv/kvtest"
)

// restartable is an embedded file-storage JetStream server that a test
// stops and starts again on the same port and store folder.
type restartable struct {
	opts server.Options
	srv  *server.Server
}

func startRestartable(t *testing.T) *restartable {
	t.Helper()
	r := &restartable{opts: server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir()}}
	r.start(t)
	_, port, err := net.SplitHostPort(r.srv.Addr().String())
	require.NoError(t, err)
	r.opts.Port, err = strconv.Atoi(port)
	require.NoError(t, err)
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) start(t *testing.T) {
	t.Helper()
	srv, err := server.NewServer(&r.opts)
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(wait))
	r.srv = srv
}

func (r *restartable) stop() {
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
}

// copyStore copies the server's store folder to a new folder, and returns
// it (the server is stopped).
func (r *restartable) copyStore(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	out, err := exec.Command("cp", "-a", r.opts.StoreDir, dst).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return dst
}

// restore replaces the server's store folder by copy (the server is
// stopped), as an operator restoring a backup, or a power loss of a lazy
// fsync, does.
func (r *restartable) restore(t *testing.T, copy string) {
	t.Helper()
	require.NoError(t, os.RemoveAll(r.opts.StoreDir))
	out, err := exec.Command("cp", "-a", copy, r.opts.StoreDir).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// TestAStoreThatForgotStartsANewEpochFromWhatItHolds: a store's writes up
// to k3 are copied; k4 to k6 are written and delivered to a watch; the
// server comes back with the copy. The store no longer holds what the
// watch delivered: the watch starts a new epoch, whose first event says
// it keeps what the store holds (OpReset at 0), and delivers k1 to k3. A
// store opened on the restored server by another process ends in the same
// epoch.
func TestAStoreThatForgotStartsANewEpochFromWhatItHolds(t *testing.T) {
	srv := startRestartable(t)
	reconnecting := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond)}
	nc := connectTo(t, srv.srv, reconnecting...)
	st := openStore(t, nc, jetstream.Config{Storage: "file", CheckInterval: 100 * time.Millisecond, ProbeInterval: 50 * time.Millisecond})
	rec := kvtest.Watch(t, st)
	put := func(key, value string) kv.Revision {
		t.Helper()
		rev, err := st.Put(t.Context(), key, []byte(value))
		require.NoError(t, err)
		return rev
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		put(k, "old")
	}
	first, _ := kvtest.LastOf(rec.Await(t, "the watch reads the bucket", func(ev []kv.Event) bool { return kvtest.Count(ev, kv.OpSynced) > 0 }), kv.OpReset)
	epoch := first.Revision.Epoch

	srv.stop()
	backup := srv.copyStore(t)
	srv.start(t)
	var last kv.Revision
	for _, k := range []string{"k4", "k5", "k6"} {
		require.Eventually(t, func() bool {
			rev, err := st.Put(t.Context(), k, []byte("lost"))
			last = rev
			return err == nil
		}, wait, 20*time.Millisecond, "writes succeed once the server is back")
	}
	rec.Await(t, "the watch delivers k6", func(ev []kv.Event) bool { return kvtest.Delivered(ev, last.Seq) })
	assert.Equal(t, epoch, last.Epoch)

	srv.stop()
	srv.restore(t, backup)
	before := len(rec.Events())
	srv.start(t)

	events := rec.Await(t, "a new epoch that keeps what the store holds", func(ev []kv.Event) bool {
		for _, e := range ev[before:] {
			if e.Op == kv.OpReset && e.Revision.Epoch != epoch {
				return true
			}
		}
		return false
	})
	var reset kv.Event
	for _, e := range events[before:] {
		if e.Op == kv.OpReset && e.Revision.Epoch != epoch {
			reset = e
			break
		}
	}
	assert.True(t, strings.HasSuffix(reset.Revision.Epoch, "-kept"), "the new epoch says it keeps what was stored: %q", reset.Revision.Epoch)
	assert.Zero(t, reset.Revision.Seq, "OpReset at 0: the epoch keeps the writes before its key")
	events = rec.Await(t, "the new epoch's content", func(ev []kv.Event) bool {
		return kvtest.Count(ev[before:], kv.OpSynced) > 0 && kvtest.State(ev, "k")["k1"] != ""
	})
	assert.Equal(t, map[string]string{"k1": "old", "k2": "old", "k3": "old"}, kvtest.State(events, "k"),
		"the state is what the store holds: k4 to k6 are forgotten")
	assert.Equal(t, uint64(1), st.Forgets())
	before = len(rec.Events())

	// Rolled back to the same copy again, the store names the first
	// epoch once more, which the watch had left: not the same history, so
	// another kept epoch, never the first one back.
	srv.stop()
	srv.restore(t, backup)
	again := len(rec.Events())
	srv.start(t)
	events = rec.Await(t, "another kept epoch", func(ev []kv.Event) bool {
		for _, e := range ev[again:] {
			if e.Op == kv.OpReset && e.Revision.Epoch != reset.Revision.Epoch && e.Revision.Epoch != epoch {
				return true
			}
		}
		return false
	})
	for _, e := range events[again:] {
		if e.Op == kv.OpReset {
			assert.NotEqual(t, epoch, e.Revision.Epoch, "the first epoch does not come back")
		}
	}
	var second kv.Event
	for _, e := range events[again:] {
		if e.Op == kv.OpReset && e.Revision.Epoch != reset.Revision.Epoch && e.Revision.Epoch != epoch {
			second = e
		}
	}
	assert.True(t, strings.HasSuffix(second.Revision.Epoch, "-kept"), second.Revision.Epoch)
	reset = second

	// Another process on the restored server ends in the same epoch.
	other := openStore(t, connectTo(t, srv.srv), jetstream.Config{Bucket: st.Bucket(), Storage: "file"})
	ep, err := other.Epoch(t.Context())
	require.NoError(t, err)
	assert.Equal(t, reset.Revision.Epoch, ep)
	assert.Zero(t, other.Forgets())
}

// TestAWatchStartedAfterAnEpochChangeFollowsNoStoreThatWentBackBeforeIt: a
// store's first epoch holds k1 and k2, and the server's store folder is
// copied; the bucket is wiped, and a second epoch begins; a store opened
// only then (as a worker restarted since) writes k3 to k5 and its watch
// delivers them. The server comes back with the copy, which names the
// first epoch, an epoch this watch never saw: its key was written before
// the last write the watch applied, so the store went back, and the watch
// starts a kept epoch instead of following the first one, whose revisions
// past the copy were served before.
func TestAWatchStartedAfterAnEpochChangeFollowsNoStoreThatWentBackBeforeIt(t *testing.T) {
	srv := startRestartable(t)
	reconnecting := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond)}
	cfg := jetstream.Config{Storage: "file", CheckInterval: 100 * time.Millisecond, ProbeInterval: 50 * time.Millisecond}
	first := openStore(t, connectTo(t, srv.srv), cfg)
	cfg.Bucket = first.Bucket()
	for _, k := range []string{"k1", "k2"} {
		_, err := first.Put(t.Context(), k, []byte("first"))
		require.NoError(t, err)
	}
	firstEpoch, err := first.Epoch(t.Context())
	require.NoError(t, err)
	first.Close()

	srv.stop()
	backup := srv.copyStore(t)
	srv.start(t)
	js, err := connectTo(t, srv.srv).JetStream()
	require.NoError(t, err)
	require.NoError(t, js.PurgeStream("KV_"+cfg.Bucket), "the bucket is wiped")

	st := openStore(t, connectTo(t, srv.srv, reconnecting...), cfg)
	rec := kvtest.Watch(t, st)
	var last kv.Revision
	for _, k := range []string{"k3", "k4", "k5"} {
		last, err = st.Put(t.Context(), k, []byte("second"))
		require.NoError(t, err)
	}
	rec.Await(t, "the watch delivers k5", func(ev []kv.Event) bool { return kvtest.Delivered(ev, last.Seq) })
	secondEpoch := last.Epoch
	require.NotEqual(t, firstEpoch, secondEpoch, "the wipe began another epoch")

	srv.stop()
	srv.restore(t, backup)
	before := len(rec.Events())
	srv.start(t)

	kept := func(ev []kv.Event) (kv.Event, bool) {
		for _, e := range ev[before:] {
			if e.Op == kv.OpReset && e.Revision.Epoch != firstEpoch && e.Revision.Epoch != secondEpoch {
				return e, true
			}
		}
		return kv.Event{}, false
	}
	events := rec.Await(t, "a kept epoch", func(ev []kv.Event) bool { _, ok := kept(ev); return ok })
	reset, _ := kept(events)
	assert.True(t, strings.HasSuffix(reset.Revision.Epoch, "-kept"), reset.Revision.Epoch)
	for _, e := range events[before:] {
		assert.False(t, e.Op == kv.OpReset && e.Revision.Epoch == firstEpoch, "the watch never follows the first epoch back")
	}
	assert.Equal(t, uint64(1), st.Forgets())
	events = rec.Await(t, "the kept epoch's content", func(ev []kv.Event) bool {
		e, _ := kept(ev)
		return kvtest.Count(ev[before:], kv.OpSynced) > 0 && e.Revision.Epoch != "" && kvtest.State(ev, "k")["k1"] != ""
	})
	assert.Equal(t, map[string]string{"k1": "first", "k2": "first"}, kvtest.State(events, "k"), "what the restored store holds")
}

// TestAStoreThatForgotWhatItAcknowledgedStartsANewEpochThoughItsWatchNeverSawIt:
// a store's writes up to k3 are copied; k4 to k6 are written and the
// stream acknowledges to the store either those writes (PutAsync) or,
// after them, its read barrier (LastRevision), while its watch has not
// delivered them (a watch that lags, or has not started); the server comes
// back with the copy. The store was acknowledged writes at revisions its
// stream no longer holds: a write it sends that the stream numbers at one
// of them is not acknowledged; once its watch runs, it starts a new epoch that
// keeps what the store holds, rather than serve the old epoch's revisions
// again with other writes. Both ways it can find out: before anything
// else is written (the stream numbers a new write at or below one it
// acknowledged), and after another process has written past them (the
// watch delivers another write at a revision it acknowledged).
func TestAStoreThatForgotWhatItAcknowledgedStartsANewEpochThoughItsWatchNeverSawIt(t *testing.T) {
	type acknowledged int
	const (
		puts    acknowledged = iota // k4 to k6, by PutAsync
		barrier                     // a read barrier after k4 to k6 (Put)
	)
	for _, c := range []struct {
		name   string
		acked  acknowledged
		refill int // writes by another process after the restore, before the watch starts
	}{
		{"its puts, nothing written since", puts, 0},
		{"its puts, another process wrote past them", puts, 6},
		{"its read barrier, nothing written since", barrier, 0},
		{"its read barrier, another process wrote past it", barrier, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startRestartable(t)
			reconnecting := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond)}
			cfg := jetstream.Config{Storage: "file", CheckInterval: 100 * time.Millisecond, ProbeInterval: 50 * time.Millisecond}
			st := openStore(t, connectTo(t, srv.srv, reconnecting...), cfg)
			cfg.Bucket = st.Bucket()
			for _, k := range []string{"k1", "k2", "k3"} {
				_, err := st.Put(t.Context(), k, []byte("old"))
				require.NoError(t, err)
			}
			epoch, err := st.Epoch(t.Context())
			require.NoError(t, err)

			srv.stop()
			backup := srv.copyStore(t)
			srv.start(t)
			for _, k := range []string{"k4", "k5", "k6"} {
				require.Eventually(t, func() bool {
					if c.acked == barrier {
						_, err := st.Put(t.Context(), k, []byte("lost"))
						return err == nil
					}
					stored := make(chan bool, 1) // the store answers every put, by its timeout at the latest
					answer := kv.PutFunc(func(rev kv.Revision, err error) { stored <- err == nil && rev.Epoch == epoch })
					if st.PutAsync(t.Context(), k, []byte("lost"), kv.NoCondition, answer) != nil {
						return false
					}
					return <-stored
				}, wait, 20*time.Millisecond, "the stream takes %s once the server is back", k)
			}
			if c.acked == barrier {
				rev, err := st.LastRevision(t.Context())
				require.NoError(t, err)
				require.Equal(t, epoch, rev.Epoch)
			}

			srv.stop()
			srv.restore(t, backup)
			srv.start(t)
			want := map[string]string{"k1": "old", "k2": "old", "k3": "old"}
			if c.refill == 0 {
				// The stream numbers the store's next put where it had
				// acknowledged another write: stored, but not acknowledged
				// in the epoch that write was.
				var err error
				require.Eventually(t, func() bool {
					answered := make(chan error, 1)
					if st.PutAsync(t.Context(), "k7", []byte("again"), kv.NoCondition, kv.PutFunc(func(_ kv.Revision, err error) { answered <- err })) != nil {
						return false
					}
					err = <-answered
					return err == nil || strings.Contains(err.Error(), "forgot")
				}, wait, 20*time.Millisecond, "the stream takes k7 once the server is back")
				require.ErrorIs(t, err, kv.ErrUnavailable)
				_, err = st.Put(t.Context(), "k8", []byte("again"))
				require.ErrorIs(t, err, kv.ErrUnavailable, "nor a plain write")
				want["k7"], want["k8"] = "again", "again"
			}
			other := openStore(t, connectTo(t, srv.srv), cfg)
			for i := range c.refill {
				_, err := other.Put(t.Context(), "k"+strconv.Itoa(7+i), []byte("after"))
				require.NoError(t, err)
				want["k"+strconv.Itoa(7+i)] = "after"
			}

			rec := kvtest.Watch(t, st)
			events := rec.Await(t, "a new epoch that keeps what the store holds", func(ev []kv.Event) bool {
				pass := sinceLastReset(ev)
				return len(pass) > 0 && pass[0].Revision.Epoch != epoch && kvtest.Count(pass, kv.OpSynced) > 0
			})
			reset, _ := kvtest.LastOf(events, kv.OpReset)
			assert.True(t, strings.HasSuffix(reset.Revision.Epoch, "-kept"), "the new epoch says it keeps what was stored: %q", reset.Revision.Epoch)
			assert.Equal(t, want, kvtest.State(events, "k"), "the state is what the store holds: k4 to k6 are forgotten")
			assert.Equal(t, uint64(1), st.Forgets())
		})
	}
}

// sinceLastReset returns the events of the last pass, its OpReset first.
func sinceLastReset(events []kv.Event) []kv.Event {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Op == kv.OpReset {
			return events[i:]
		}
	}
	return nil
}
