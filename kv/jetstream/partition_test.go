package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/binaries"
	"github.com/flowstate-io/flowstate/internal/proctest"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/kv/jetstream"
)

// events is what a watch delivered, for a test to wait on.
type events struct {
	mu     sync.Mutex
	puts   map[string]string
	synced bool
	resets int
	log    []kv.Event // every event, in order
	kick   chan struct{}
}

func (e *events) add(ev kv.Event) {
	e.mu.Lock()
	ev.Value = append([]byte(nil), ev.Value...)
	e.log = append(e.log, ev)
	switch ev.Op {
	case kv.OpPut:
		e.puts[ev.Key] = string(ev.Value)
	case kv.OpSynced:
		e.synced = true
	case kv.OpReset:
		e.resets++
	}
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// await waits, up to within, until cond holds of what was delivered.
func (e *events) await(t *testing.T, what string, within time.Duration, cond func(e *events) bool) {
	t.Helper()
	deadline := time.After(within)
	for {
		e.mu.Lock()
		ok := cond(e)
		e.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-e.kick:
		case <-deadline:
			t.Fatalf("the watch did not deliver %s within %v", what, within)
		}
	}
}

// consumerHosts returns the stream's consumers, each with the server that
// hosts it. JetStream may not answer for a while after a partition heals
// (its meta leader may step down): it is asked for up to 30 s.
func consumerHosts(t *testing.T, js natsjs.JetStream, stream string) map[string]string {
	t.Helper()
	var err error
	for try := 0; try < 10; try++ {
		var out map[string]string
		if out, err = listConsumerHosts(t.Context(), js, stream); err == nil {
			return out
		}
	}
	require.NoError(t, err, "the consumers of stream %s", stream)
	return nil
}

func listConsumerHosts(ctx context.Context, js natsjs.JetStream, stream string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	l := st.ListConsumers(ctx)
	for ci := range l.Info() {
		if ci.Cluster != nil {
			out[ci.Name] = ci.Cluster.Leader
		}
	}
	return out, l.Err()
}

// remoteWatch is a watch on a cluster of three whose consumer is on
// another server than the watch's own.
type remoteWatch struct {
	cl       *proctest.Cluster
	js       natsjs.JetStream // on every server
	st       *jetstream.Store // the watch's store, on server own alone
	watched  *events
	own      int    // the watch's server
	other    int    // its consumer's server
	consumer string // its consumer's name
	known    map[string]string
	connect  func(url string) *nats.Conn
	open     func(nc *nats.Conn) *jetstream.Store
}

const partitionedBucket = "partitioned"

// startRemoteWatch starts a cluster of three with an R3 bucket and a watch
// whose consumer is on another server than the watch's.
func startRemoteWatch(t *testing.T) *remoteWatch {
	t.Helper()
	if testing.Short() {
		t.Skip("builds nats-server and runs a cluster of three")
	}
	bins, err := binaries.Build(t.Context(), t.TempDir())
	require.NoError(t, err)
	cl, err := proctest.StartCluster(proctest.ClusterSpec{Path: bins.NATSServer, Name: "kvjs", Proxied: true,
		StoreDir: func(int) string { return t.TempDir() }})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, cl.Close()) })
	require.NoError(t, cl.AwaitJetStream(30*time.Second))
	urls := cl.URLs()
	r := &remoteWatch{cl: cl}
	r.connect = func(url string) *nats.Conn {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	r.js, err = natsjs.New(r.connect(strings.Join(urls, ",")))
	require.NoError(t, err)
	r.open = func(nc *nats.Conn) *jetstream.Store {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		st, err := jetstream.Open(ctx, nc, jetstream.Config{Bucket: partitionedBucket, Replicas: 3})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		return st
	}

	// The watch's consumer goes to a server of the stream's, at random:
	// watches start, on server i in turn, until one's consumer is on
	// another server than its own.
	var (
		stopped = make(chan error, 1)
		stop    context.CancelFunc
		host    string
	)
	for try := 0; r.consumer == ""; try++ {
		require.Less(t, try, 30, "no watch's consumer went to another server than the watch's")
		r.own = try % len(urls)
		r.st = r.open(r.connect(urls[r.own]))
		before := consumerHosts(t, r.js, "KV_"+partitionedBucket) // left by the watches tried before
		e := &events{puts: map[string]string{}, kick: make(chan struct{}, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.st.Watch(ctx, e.add) }()
		e.await(t, "its first OpSynced", 30*time.Second, func(e *events) bool { return e.synced })
		for name, h := range consumerHosts(t, r.js, "KV_"+partitionedBucket) {
			if _, old := before[name]; !old && h != fmt.Sprintf("s%d", r.own) {
				r.consumer, host = name, h
			}
		}
		if r.consumer != "" {
			r.watched, stopped, stop = e, done, cancel
			break
		}
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	}
	t.Cleanup(func() {
		stop()
		assert.ErrorIs(t, <-stopped, context.Canceled)
	})
	_, err = fmt.Sscanf(host, "s%d", &r.other)
	require.NoError(t, err)
	r.known = consumerHosts(t, r.js, "KV_"+partitionedBucket) // the watch's, and those that the watches tried before left
	return r
}

// cutOff cuts every route of the watch's consumer's server, until the
// test ends or heal is called.
func (r *remoteWatch) cutOff(t *testing.T) (heal func()) {
	var routes []*proctest.Link
	for i := range r.cl.Servers {
		if i != r.other {
			routes = append(routes, r.cl.Route(r.other, i))
		}
	}
	for _, l := range routes {
		l.Cut()
	}
	heal = func() {
		for _, l := range routes {
			l.Heal()
		}
	}
	t.Cleanup(heal)
	return heal
}

// put writes key through st, retrying while JetStream is unavailable (a
// stream leader being elected on the servers that st can reach).
func put(t *testing.T, st *jetstream.Store, key, value string) kv.Revision {
	t.Helper()
	for try := 0; ; try++ {
		rev, err := st.Put(t.Context(), key, []byte(value))
		if err == nil {
			return rev
		}
		require.ErrorIs(t, err, kv.ErrUnavailable)
		require.Less(t, try, 300, "the write of %s was never taken: %v", key, err)
		time.Sleep(100 * time.Millisecond) // the store probes JetStream meanwhile
	}
}

// A watch's consumer on another server than the watch's own outlasts a
// partition between the two: it pauses while the route is cut and goes on
// where it was once the route is back, so that the watch delivers what was
// written meanwhile from the same consumer, with no consumer to create,
// which takes the cluster's meta leader (and a heal can take that away for
// an election timeout).
func TestWatchKeepsItsConsumerThroughAPartitionFromItsServer(t *testing.T) {
	r := startRemoteWatch(t)
	// The route between the watch's server and its consumer's is cut for
	// three heartbeats (the store's default, 1 s): more than the two in
	// which a consumer that sends them every heartbeat is given up and
	// recreated. A write meanwhile goes through the third server.
	writer := r.open(r.connect(r.cl.URLs()[3-r.own-r.other]))
	route := r.cl.Route(r.own, r.other)
	route.Cut()
	rev := put(t, writer, "during", "the cut")
	time.Sleep(3 * jetstream.DefaultHeartbeat) // the fault lasts its time
	route.Heal()

	r.watched.await(t, fmt.Sprintf("the write at revision %d", rev.Seq), 60*time.Second, func(e *events) bool {
		return e.puts["during"] == "the cut"
	})
	hosts := consumerHosts(t, r.js, "KV_"+partitionedBucket)
	host := fmt.Sprintf("s%d", r.other)
	assert.Equal(t, host, hosts[r.consumer], "the watch's consumer %s on %s is kept through the cut; the stream's consumers now: %v", r.consumer, host, hosts)
	for name, h := range hosts {
		_, ok := r.known[name]
		assert.True(t, ok, "the watch made consumer %s on %s: it did not keep %s on %s through the cut", name, h, r.consumer, host)
	}
}

// A watch whose consumer's server is cut off from the others while the
// store sees writes stored goes on with another consumer, made before the
// stuck one is let go, from where it was: no OpReset, no reload.
func TestAStuckWatchGoesOnWithAnotherConsumerWithoutStartingOver(t *testing.T) {
	r := startRemoteWatch(t)
	r.cutOff(t)
	rev := put(t, r.st, "during", "the cut")
	r.watched.await(t, fmt.Sprintf("the write at revision %d, with its consumer's server cut off", rev.Seq), 60*time.Second, func(e *events) bool {
		return e.puts["during"] == "the cut"
	})
	r.watched.mu.Lock()
	defer r.watched.mu.Unlock()
	assert.Equal(t, 1, r.watched.resets, "the watch went on from where it was, without starting over")
}

// A watch whose consumer's server was cut off from the others goes on,
// once the cut heals, from that server while it catches up with the
// stream. The server is sent what the stream holds, without the writes
// replaced meanwhile, so until it has caught up the watch skips writes
// whose replacements it has not delivered yet: no state the store had.
// An event is exact only at a state the store had.
func TestAWatchIsExactOnlyAtAStateTheStoreHad(t *testing.T) {
	r := startRemoteWatch(t)
	heal := r.cutOff(t)
	// Every key written three times while the consumer's server is cut
	// off, by another store than the watch's (whose own writes would make
	// the watch replace its stuck consumer).
	writer := r.open(r.connect(r.cl.URLs()[3-r.own-r.other]))
	type write struct{ key, value string }
	written := map[uint64]write{}
	const keys, rounds = 300, 3
	for round := range rounds {
		for k := range keys {
			key, value := fmt.Sprintf("k%d", k), fmt.Sprint(round)
			written[put(t, writer, key, value).Seq] = write{key, value}
		}
	}
	heal()
	r.watched.await(t, "every key's last write", 120*time.Second, func(e *events) bool {
		for k := range keys {
			if e.puts[fmt.Sprintf("k%d", k)] != fmt.Sprint(rounds-1) {
				return false
			}
		}
		return true
	})

	// The store's content as of seq: each key's last write at or below it.
	had := func(seq uint64) map[string]string {
		m := map[string]string{}
		var last = map[string]uint64{}
		for s, w := range written {
			if s <= seq && s > last[w.key] {
				last[w.key], m[w.key] = s, w.value
			}
		}
		return m
	}
	r.watched.mu.Lock()
	defer r.watched.mu.Unlock()
	seen := map[string]string{}
	first := minSeq(written)
	var checked int
	for _, ev := range r.watched.log {
		switch ev.Op {
		case kv.OpReset:
			clear(seen)
		case kv.OpPut:
			if strings.HasPrefix(ev.Key, "k") {
				seen[ev.Key] = string(ev.Value)
			}
		case kv.OpDelete:
			delete(seen, ev.Key)
		}
		if !ev.Exact || ev.Revision.Seq < first {
			continue
		}
		want := had(ev.Revision.Seq)
		if !assert.Equal(t, want, seen, "the watch said it was exact at revision %d (%s)", ev.Revision.Seq, ev) {
			return
		}
		checked++
	}
	t.Logf("%d events, %d exact ones checked from revision %d on", len(r.watched.log), checked, first)
}

func minSeq[V any](m map[uint64]V) uint64 {
	least := uint64(0)
	for s := range m {
		if least == 0 || s < least {
			least = s
		}
	}
	return least
}
