package kv_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"flowstate/internal/natstest"
	"flowstate/kv"
	"flowstate/kv/kvtest"
)

// wait bounds every wait of these tests.
const wait = 10 * time.Second

// startJetStream runs an embedded NATS server with JetStream on a free
// loopback port; Cleanup stops it.
func startJetStream(tb testing.TB) *server.Server {
	tb.Helper()
	return natstest.Start(tb, &server.Options{JetStream: true})
}

func connectTo(tb testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	return nc
}

var buckets atomic.Int64

// openStore opens a new bucket on s; Cleanup closes the store.
func openStore(tb testing.TB, nc *nats.Conn, cfg kv.JetStreamConfig) *kv.JetStream {
	tb.Helper()
	if cfg.Bucket == "" {
		cfg.Bucket = fmt.Sprintf("test_%d", buckets.Add(1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := kv.OpenJetStream(ctx, nc, cfg)
	require.NoError(tb, err)
	tb.Cleanup(st.Close)
	return st
}

func TestJetStream(t *testing.T) {
	nc := connectTo(t, startJetStream(t))
	kvtest.Run(t, func(t *testing.T) kv.Store { return openStore(t, nc, kv.JetStreamConfig{}) })
}

// TestJetStreamSharesKeysAndEpochAcrossStores opens one bucket twice, as two
// workers do: each sees the other's writes, and both have one epoch.
func TestJetStreamSharesKeysAndEpochAcrossStores(t *testing.T) {
	srv := startJetStream(t)
	a := openStore(t, connectTo(t, srv), kv.JetStreamConfig{Bucket: "shared"})
	b := openStore(t, connectTo(t, srv), kv.JetStreamConfig{Bucket: "shared"})
	ctx := t.Context()

	ea, err := a.Epoch(ctx)
	require.NoError(t, err)
	eb, err := b.Epoch(ctx)
	require.NoError(t, err)
	assert.Equal(t, ea, eb)

	rev, err := a.Put(ctx, "__flow/state/node/1", []byte(`{"state_size":{}}`))
	require.NoError(t, err)
	e, err := b.Get(ctx, "__flow/state/node/1")
	require.NoError(t, err)
	assert.Equal(t, rev.Seq, e.Revision)
	assert.Equal(t, `{"state_size":{}}`, string(e.Value))

	// A clear by one is a new epoch for both.
	require.NoError(t, b.Clear(ctx))
	ea2, err := a.Epoch(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, ea, ea2)
	_, err = a.Get(ctx, "__flow/state/node/1")
	assert.ErrorIs(t, err, kv.ErrNotFound)
}

func TestJetStreamReservesTheEpochKey(t *testing.T) {
	st := openStore(t, connectTo(t, startJetStream(t)), kv.JetStreamConfig{})
	_, err := st.Put(t.Context(), kv.DefaultEpochKey, []byte("x"))
	assert.Error(t, err)
	_, err = st.Delete(t.Context(), kv.DefaultEpochKey)
	assert.Error(t, err)
	entries, err := st.Range(t.Context(), "")
	require.NoError(t, err)
	assert.Empty(t, entries, "the epoch key is not listed")
}

func TestJetStreamConditionalWrites(t *testing.T) {
	st := openStore(t, connectTo(t, startJetStream(t)), kv.JetStreamConfig{})
	ctx := t.Context()

	// Create-only: the first wins.
	first, err := st.PutIf(ctx, "lease", []byte("a"), kv.Condition{Key: "lease"})
	require.NoError(t, err)
	_, err = st.PutIf(ctx, "lease", []byte("b"), kv.Condition{Key: "lease"})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)

	// Compare-and-set on the key's revision.
	second, err := st.PutIf(ctx, "lease", []byte("a2"), kv.Condition{Key: "lease", Revision: first.Seq})
	require.NoError(t, err)
	_, err = st.PutIf(ctx, "lease", []byte("stale"), kv.Condition{Key: "lease", Revision: first.Seq})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)

	// Fenced on another key.
	_, err = st.PutIf(ctx, "agg", []byte("v1"), kv.Condition{Key: "lease", Revision: second.Seq})
	require.NoError(t, err)
	_, err = st.PutIf(ctx, "agg", []byte("v0"), kv.Condition{Key: "lease", Revision: first.Seq})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	e, err := st.Get(ctx, "agg")
	require.NoError(t, err)
	assert.Equal(t, "v1", string(e.Value))

	// A conditional delete, then a create over the deletion's revision.
	_, err = st.DeleteIf(ctx, "lease", kv.Condition{Key: "lease", Revision: first.Seq})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch)
	del, err := st.DeleteIf(ctx, "lease", kv.Condition{Key: "lease", Revision: second.Seq})
	require.NoError(t, err)
	_, err = st.PutIf(ctx, "lease", []byte("c"), kv.Condition{Key: "lease"})
	require.ErrorIs(t, err, kv.ErrRevisionMismatch, "the deletion is the key's last write")
	_, err = st.PutIf(ctx, "lease", []byte("c"), kv.Condition{Key: "lease", Revision: del.Seq})
	require.NoError(t, err)
}

// recorder collects a watch's events.
type recorder struct {
	mu     sync.Mutex
	events []kv.Event
	kick   chan struct{}
}

func newRecorder() *recorder { return &recorder{kick: make(chan struct{}, 1)} }

func (r *recorder) add(e kv.Event) {
	r.mu.Lock()
	e.Value = append([]byte(nil), e.Value...)
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// await waits until pred holds for the events so far and returns them.
func (r *recorder) await(tb testing.TB, what string, pred func([]kv.Event) bool) []kv.Event {
	tb.Helper()
	deadline := time.After(wait)
	for {
		r.mu.Lock()
		events := append([]kv.Event(nil), r.events...)
		r.mu.Unlock()
		if pred(events) {
			return events
		}
		select {
		case <-r.kick:
		case <-deadline:
			tb.Fatalf("%s: not within %v; events: %v", what, wait, events)
		}
	}
}

func watch(tb testing.TB, st *kv.JetStream) *recorder {
	tb.Helper()
	r := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Watch(ctx, r.add) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(tb, err, context.Canceled)
		case <-time.After(wait):
			tb.Error("Watch did not return after its context ended")
		}
	})
	return r
}

func count(events []kv.Event, op kv.Op) int {
	n := 0
	for _, e := range events {
		if e.Op == op {
			n++
		}
	}
	return n
}

func lastOf(events []kv.Event, op kv.Op) (kv.Event, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Op == op {
			return events[i], true
		}
	}
	return kv.Event{}, false
}

// TestJetStreamWatchDeliversCurrentThenLiveWritesInOrder checks the order of
// a watch: reset, each key's last value, synced, then live writes with their
// revisions, deletions included.
func TestJetStreamWatchDeliversCurrentThenLiveWritesInOrder(t *testing.T) {
	st := openStore(t, connectTo(t, startJetStream(t)), kv.JetStreamConfig{})
	ctx := t.Context()
	epoch, err := st.Epoch(ctx)
	require.NoError(t, err)
	_, err = st.Put(ctx, "a", []byte("1"))
	require.NoError(t, err)
	b, err := st.Put(ctx, "b", []byte("2"))
	require.NoError(t, err)
	a2, err := st.Put(ctx, "a", []byte("3"))
	require.NoError(t, err)

	r := watch(t, st)
	events := r.await(t, "synced", func(ev []kv.Event) bool { return count(ev, kv.OpSynced) == 1 })
	require.Equal(t, kv.OpReset, events[0].Op)
	assert.Equal(t, epoch, events[0].Revision.Epoch)
	var puts []string
	for _, e := range events[1 : len(events)-1] {
		if e.Key != kv.DefaultEpochKey {
			puts = append(puts, fmt.Sprintf("%s=%s@%d", e.Key, e.Value, e.Revision.Seq))
		}
	}
	assert.Equal(t, []string{fmt.Sprintf("b=2@%d", b.Seq), fmt.Sprintf("a=3@%d", a2.Seq)}, puts, "last values in sequence order")
	synced := events[len(events)-1]
	assert.Equal(t, a2.Seq, synced.Revision.Seq)
	assert.True(t, synced.Exact)

	c, err := st.Put(ctx, "c", []byte("4"))
	require.NoError(t, err)
	d, err := st.Delete(ctx, "b")
	require.NoError(t, err)
	events = r.await(t, "live writes", func(ev []kv.Event) bool { return ev[len(ev)-1].Revision.Seq == d.Seq })
	live := events[len(events)-2:]
	assert.WithinDuration(t, time.Now(), live[0].Time, 5*time.Second)
	live[0].Time, live[1].Time = time.Time{}, time.Time{}
	assert.Equal(t, kv.Event{Op: kv.OpPut, Key: "c", Value: []byte("4"), Revision: kv.Revision{Epoch: epoch, Seq: c.Seq}, Exact: true}, live[0])
	assert.Equal(t, kv.Event{Op: kv.OpDelete, Key: "b", Revision: kv.Revision{Epoch: epoch, Seq: d.Seq}, Exact: true}, live[1])

	last, err := st.LastRevision(ctx)
	require.NoError(t, err)
	assert.Equal(t, d.Seq, last.Seq)
}

// TestJetStreamWatchStartsOverOnANewEpoch wipes the bucket three ways and
// requires the watch to start over at a new epoch each time.
func TestJetStreamWatchStartsOverOnANewEpoch(t *testing.T) {
	srv := startJetStream(t)
	st := openStore(t, connectTo(t, srv), kv.JetStreamConfig{CheckInterval: 50 * time.Millisecond})
	other := connectTo(t, srv)
	js, err := jetstream.New(other)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = st.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
	r := watch(t, st)
	r.await(t, "synced", func(ev []kv.Event) bool { return count(ev, kv.OpSynced) == 1 })

	epochs := map[string]bool{}
	for i, wipe := range []struct {
		how string
		do  func()
	}{
		{"Clear", func() { require.NoError(t, st.Clear(ctx)) }},
		{"stream purge by another client", func() {
			s, err := js.Stream(ctx, "KV_"+st.Bucket())
			require.NoError(t, err)
			require.NoError(t, s.Purge(ctx))
		}},
		{"bucket deleted by another client", func() { require.NoError(t, js.DeleteKeyValue(ctx, st.Bucket())) }},
	} {
		_, err := st.Put(ctx, "k", []byte(fmt.Sprint(i)))
		require.NoError(t, err, wipe.how)
		before, _ := lastOf(r.await(t, "reset", func(ev []kv.Event) bool { return count(ev, kv.OpReset) == i+1 }), kv.OpReset)
		epochs[before.Revision.Epoch] = true
		wipe.do()
		events := r.await(t, "new epoch after "+wipe.how, func(ev []kv.Event) bool {
			return count(ev, kv.OpReset) == i+2 && count(ev, kv.OpSynced) == i+2
		})
		reset, _ := lastOf(events, kv.OpReset)
		assert.False(t, epochs[reset.Revision.Epoch], "%s: epoch %s again", wipe.how, reset.Revision.Epoch)
		epoch, err := st.Epoch(ctx)
		require.NoError(t, err)
		assert.Equal(t, epoch, reset.Revision.Epoch, wipe.how)
		_, err = st.Get(ctx, "k")
		assert.ErrorIs(t, err, kv.ErrNotFound, "%s: the key is gone", wipe.how)
	}
}

func TestJetStreamRefusesAnIncompatibleBucket(t *testing.T) {
	srv := startJetStream(t)
	nc := connectTo(t, srv)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "filed", Storage: jetstream.FileStorage})
	require.NoError(t, err)
	_, err = js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "expiring", Storage: jetstream.MemoryStorage, TTL: time.Hour})
	require.NoError(t, err)

	for _, tc := range []struct {
		cfg  kv.JetStreamConfig
		want string
	}{
		{kv.JetStreamConfig{Bucket: "filed"}, `bucket "filed" has 1 replicas and file storage, not 1 replicas and memory storage`},
		{kv.JetStreamConfig{Bucket: "expiring"}, "expires keys"},
	} {
		_, err := kv.OpenJetStream(t.Context(), nc, tc.cfg)
		require.ErrorIs(t, err, kv.ErrIncompatibleBucket)
		assert.Contains(t, err.Error(), tc.want)
	}
	// The same settings open it.
	openStore(t, nc, kv.JetStreamConfig{Bucket: "filed", Storage: "file"})
}

// TestJetStreamFailsFastWhileUnavailableAndRecovers stops JetStream's server
// under a store: writes fail with ErrUnavailable within the op timeout, then
// at once, and succeed again once the server is back.
func TestJetStreamFailsFastWhileUnavailableAndRecovers(t *testing.T) {
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true, JetStream: true, StoreDir: dir}
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(wait))
	port := srv.Addr().(interface{ String() string }).String()
	nc := connectTo(t, srv, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	st := openStore(t, nc, kv.JetStreamConfig{Storage: "file", OpTimeout: 500 * time.Millisecond, ProbeInterval: 50 * time.Millisecond})
	ctx := t.Context()
	_, err = st.Put(ctx, "k", []byte("1"))
	require.NoError(t, err)

	srv.Shutdown()
	srv.WaitForShutdown()
	for range 3 {
		start := time.Now()
		_, err = st.Put(ctx, "k", []byte("2"))
		require.ErrorIs(t, err, kv.ErrUnavailable)
		assert.Less(t, time.Since(start), time.Second, "a write fails within the op timeout")
	}

	opts2 := *opts
	_, portStr, _ := cutLast(port, ":")
	fmt.Sscan(portStr, &opts2.Port)
	srv2, err := server.NewServer(&opts2)
	require.NoError(t, err)
	go srv2.Start()
	require.True(t, srv2.ReadyForConnections(wait))
	t.Cleanup(func() {
		srv2.Shutdown()
		srv2.WaitForShutdown()
	})
	require.Eventually(t, func() bool {
		_, err := st.Put(ctx, "k", []byte("3"))
		return err == nil
	}, wait, 20*time.Millisecond, "writes succeed again")
	e, err := st.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "3", string(e.Value))
}

func cutLast(s, sep string) (string, string, bool) {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
