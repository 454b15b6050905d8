package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/kv/jetstream"
	"github.com/flowstate-io/flowstate/kv/kvtest"
	"github.com/flowstate-io/flowstate/protocol"
)

// wait bounds every wait of these tests.
const wait = kvtest.Wait

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
func openStore(tb testing.TB, nc *nats.Conn, cfg jetstream.Config) *jetstream.Store {
	tb.Helper()
	if cfg.Bucket == "" {
		cfg.Bucket = fmt.Sprintf("test_%d", buckets.Add(1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := jetstream.Open(ctx, nc, cfg)
	require.NoError(tb, err)
	tb.Cleanup(st.Close)
	return st
}

func TestJetStream(t *testing.T) {
	nc := connectTo(t, startJetStream(t))
	kvtest.Run(t, func(t *testing.T) kvtest.Store { return openStore(t, nc, jetstream.Config{}) })
	kvtest.RunShared(t, func(t *testing.T) kvtest.Shared { return openStore(t, nc, jetstream.Config{}) })
	kvtest.RunAsync(t, func(t *testing.T) kvtest.AsyncShared { return openStore(t, nc, jetstream.Config{}) })
}

// TestJetStreamSharesKeysAndEpochAcrossStores opens one bucket twice, as two
// workers do: each sees the other's writes, and both have one epoch.
func TestJetStreamSharesKeysAndEpochAcrossStores(t *testing.T) {
	srv := startJetStream(t)
	a := openStore(t, connectTo(t, srv), jetstream.Config{Bucket: "shared"})
	b := openStore(t, connectTo(t, srv), jetstream.Config{Bucket: "shared"})
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
	st := openStore(t, connectTo(t, startJetStream(t)), jetstream.Config{})
	_, err := st.Put(t.Context(), jetstream.DefaultEpochKey, []byte("x"))
	assert.Error(t, err)
	_, err = st.Delete(t.Context(), jetstream.DefaultEpochKey)
	assert.Error(t, err)
	_, err = st.Get(t.Context(), jetstream.DefaultEpochKey)
	assert.NoError(t, err, "the epoch key stays the store's")
}

// TestJetStreamWatchStartsOverOnANewEpoch wipes the bucket three ways and
// requires the watch to start over at a new epoch each time.
func TestJetStreamWatchStartsOverOnANewEpoch(t *testing.T) {
	srv := startJetStream(t)
	st := openStore(t, connectTo(t, srv), jetstream.Config{CheckInterval: 50 * time.Millisecond})
	other := connectTo(t, srv)
	js, err := natsjs.New(other)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = st.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
	r := kvtest.Watch(t, st)
	r.Await(t, "synced", func(ev []kv.Event) bool { return kvtest.Count(ev, kv.OpSynced) == 1 })

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
		before, _ := kvtest.LastOf(r.Await(t, "reset", func(ev []kv.Event) bool { return kvtest.Count(ev, kv.OpReset) == i+1 }), kv.OpReset)
		epochs[before.Revision.Epoch] = true
		wipe.do()
		events := r.Await(t, "new epoch after "+wipe.how, func(ev []kv.Event) bool {
			return kvtest.Count(ev, kv.OpReset) == i+2 && kvtest.Count(ev, kv.OpSynced) == i+2
		})
		reset, _ := kvtest.LastOf(events, kv.OpReset)
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
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	_, err = js.CreateKeyValue(t.Context(), natsjs.KeyValueConfig{Bucket: "filed", Storage: natsjs.FileStorage})
	require.NoError(t, err)
	_, err = js.CreateKeyValue(t.Context(), natsjs.KeyValueConfig{Bucket: "expiring", Storage: natsjs.MemoryStorage, TTL: time.Hour})
	require.NoError(t, err)

	for _, tc := range []struct {
		cfg  jetstream.Config
		want string
	}{
		{jetstream.Config{Bucket: "filed"}, `bucket "filed" has 1 replicas and file storage, not 1 replicas and memory storage`},
		{jetstream.Config{Bucket: "expiring"}, "expires keys"},
	} {
		_, err := jetstream.Open(t.Context(), nc, tc.cfg)
		require.ErrorIs(t, err, jetstream.ErrIncompatibleBucket)
		assert.Contains(t, err.Error(), tc.want)
	}
	// The same settings open it.
	openStore(t, nc, jetstream.Config{Bucket: "filed", Storage: "file"})
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
	st := openStore(t, nc, jetstream.Config{Storage: "file", OpTimeout: 500 * time.Millisecond, ProbeInterval: 50 * time.Millisecond})
	ctx := t.Context()
	_, err = st.Put(ctx, "k", []byte("1"))
	require.NoError(t, err)

	srv.Shutdown()
	srv.WaitForShutdown()
	for range 3 {
		// The caller's deadline is ten op timeouts away: a write that
		// has failed while that deadline is still ahead was ended by the
		// store's own bound.
		putCtx, cancel := context.WithTimeout(ctx, 10*500*time.Millisecond)
		_, err = st.Put(putCtx, "k", []byte("2"))
		callerExpired := putCtx.Err()
		cancel()
		require.ErrorIs(t, err, kv.ErrUnavailable)
		assert.NoError(t, callerExpired, "a write fails within the op timeout, before the caller's deadline")
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

// TestJetStreamLastRevisionRefusesAWipedEpoch: once the bucket is purged,
// the read barrier's revision is refused until the store is in the new
// epoch, so that no worker serves what its watch had read of the old one.
func TestJetStreamLastRevisionRefusesAWipedEpoch(t *testing.T) {
	nc := connectTo(t, startJetStream(t))
	st := openStore(t, nc, jetstream.Config{ProbeInterval: time.Hour})
	_, err := st.Put(t.Context(), "k", []byte("v"))
	require.NoError(t, err)
	before, err := st.LastRevision(t.Context())
	require.NoError(t, err)

	js, err := jetstreamFor(nc)
	require.NoError(t, err)
	stream, err := js.Stream(t.Context(), "KV_"+st.Bucket())
	require.NoError(t, err)
	require.NoError(t, stream.Purge(t.Context()))
	_, err = st.LastRevision(t.Context())
	require.ErrorIs(t, err, kv.ErrUnavailable)
	assert.ErrorContains(t, err, "wiped")

	epoch, err := st.Epoch(t.Context())
	require.NoError(t, err)
	after, err := st.LastRevision(t.Context())
	require.NoError(t, err)
	assert.Equal(t, epoch, after.Epoch)
	assert.NotEqual(t, before.Epoch, after.Epoch)
}

// TestJetStreamLastRevisionIsPastEveryWriteBeforeIt: the read barrier's
// revision is a write of its own, numbered by the stream's leader after
// every write it had taken, not the last sequence number the leader
// reports (which lags what a follower may have applied and delivered).
func TestJetStreamLastRevisionIsPastEveryWriteBeforeIt(t *testing.T) {
	nc := connectTo(t, startJetStream(t))
	st := openStore(t, nc, jetstream.Config{ProbeInterval: time.Hour})
	put, err := st.Put(t.Context(), "k", []byte("v"))
	require.NoError(t, err)
	first, err := st.LastRevision(t.Context())
	require.NoError(t, err)
	assert.Greater(t, first.Seq, put.Seq, "the barrier's own write comes after the put")
	second, err := st.LastRevision(t.Context())
	require.NoError(t, err)
	assert.Greater(t, second.Seq, first.Seq, "each barrier is a write of its own")
	e, err := st.Get(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, "v", string(e.Value), "the barrier's writes leave the keys as they were")
}

// An epoch key that holds no valid epoch (not 1 to 64 printable ASCII
// characters: written from outside, here with terminal escapes, and one of
// 600 kB) is replaced with a new epoch, as a missing key is, whether the
// store reads it first or its watch sees it written; it is never served.
func TestJetStreamReplacesAnEpochThatIsNoEpoch(t *testing.T) {
	srv := startJetStream(t)
	st := openStore(t, connectTo(t, srv), jetstream.Config{CheckInterval: 50 * time.Millisecond})
	nc := connectTo(t, srv)
	ctx := t.Context()
	first, err := st.Epoch(ctx)
	require.NoError(t, err)
	r := kvtest.Watch(t, st)
	r.Await(t, "synced", func(ev []kv.Event) bool { return kvtest.Count(ev, kv.OpSynced) == 1 })
	for i, bad := range []string{"\x1b[2J\x1b]0;pwned\x07", strings.Repeat("e", 600_000), "with space", ""} {
		require.NoError(t, nc.Publish("$KV."+st.Bucket()+"."+jetstream.DefaultEpochKey, []byte(bad)))
		require.NoError(t, nc.Flush())
		events := r.Await(t, "a new epoch", func(ev []kv.Event) bool { return kvtest.Count(ev, kv.OpReset) == i+2 })
		reset, _ := kvtest.LastOf(events, kv.OpReset)
		assert.True(t, protocol.ValidEpoch(reset.Revision.Epoch), "case %d: the watch serves epoch %q", i, reset.Revision.Epoch)
		assert.NotEqual(t, first, reset.Revision.Epoch)
		e, err := st.Epoch(ctx)
		require.NoError(t, err)
		assert.True(t, protocol.ValidEpoch(e), "case %d: epoch %q", i, e)
		stored, err := st.Get(ctx, jetstream.DefaultEpochKey)
		require.NoError(t, err)
		assert.Equal(t, e, string(stored.Value), "case %d: the key holds the new epoch", i)
	}
}
