package jetstream_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/kv/jetstream"
)

// answer is what PutAsync's done was called with.
type answer struct {
	rev kv.Revision
	err error
}

// putAll sends puts of key i%keys, value i, with PutAsync, and returns the
// answers by index once all have come.
func putAll(t *testing.T, st *jetstream.Store, n, keys int) []answer {
	t.Helper()
	out := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		err := st.PutAsync(t.Context(), fmt.Sprintf("k%d", i%keys), []byte(fmt.Sprint(i)), kv.NoCondition, kv.PutFunc(func(rev kv.Revision, err error) {
			out[i] = answer{rev, err}
			wg.Done()
		}))
		if err != nil {
			wg.Done()
			out[i] = answer{err: err}
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("not every put was answered")
	}
	return out
}

func TestPutAsyncStoresInCallOrderWithinTheWindow(t *testing.T) {
	nc := connectTo(t, startJetStream(t))
	st := openStore(t, nc, jetstream.Config{Window: 8})
	const n, keys = 300, 7
	answers := putAll(t, st, n, keys)
	var last uint64
	for i, a := range answers {
		require.NoError(t, a.err, "put %d", i)
		assert.Greater(t, a.rev.Seq, last, "put %d stored after the one before", i)
		last = a.rev.Seq
	}
	for k := range keys {
		e, err := st.Get(t.Context(), fmt.Sprintf("k%d", k))
		require.NoError(t, err)
		lastOfKey := n - 1 - (n-1-k)%keys
		assert.Equal(t, fmt.Sprint(lastOfKey), string(e.Value), "key k%d holds its last put", k)
	}
}

func TestPutAsyncSendsNothingWhileDisconnected(t *testing.T) {
	srv := startJetStream(t)
	nc := connectTo(t, srv)
	st := openStore(t, nc, jetstream.Config{})
	nc.Close()
	called := false
	err := st.PutAsync(t.Context(), "k", []byte("v"), kv.NoCondition, kv.PutFunc(func(kv.Revision, error) { called = true }))
	require.ErrorIs(t, err, kv.ErrUnavailable)
	assert.False(t, called, "done is not called when PutAsync fails")
}

func TestPutAsyncWithoutTheStreamIsAnsweredUnavailable(t *testing.T) {
	nc := connectTo(t, startJetStream(t))
	st := openStore(t, nc, jetstream.Config{ProbeInterval: time.Hour})
	js, err := jetstreamFor(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteKeyValue(t.Context(), st.Bucket()))
	answers := putAll(t, st, 1, 1)
	require.ErrorIs(t, answers[0].err, kv.ErrUnavailable, "no stream: no responders")
	err = st.PutAsync(t.Context(), "k", []byte("v"), kv.NoCondition, kv.PutFunc(func(kv.Revision, error) { t.Error("sent while JetStream is down") }))
	require.ErrorIs(t, err, kv.ErrUnavailable, "nothing is sent until a probe finds JetStream back")
}

func jetstreamFor(nc *nats.Conn) (natsjs.JetStream, error) { return natsjs.New(nc) }
