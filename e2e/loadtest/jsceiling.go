package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/loadgen"
)

// ceilingBucket is the bucket of the ceiling's puts, deleted after each
// measure.
const ceilingBucket = "flowstate_ceiling"

// jsCeiling is JetStream's own rate for the JetStream backend's job,
// measured on the same servers just before its workers start: a client
// writes the workers' values to the workers' keys (one a node, the value a
// worker writes for its report), each put conditional on its key's last
// write (Nats-Expected-Last-Subject-Sequence) as a worker's is, with as
// many in flight as the acked load keeps, through nats.go's own
// asynchronous publish; a put counts once the stream acknowledged it and
// one watch of the bucket a worker of the scenario delivered it, as a worker
// acks a report once its watch applied it and every worker applies every
// write. No worker is in between.
type jsCeiling struct {
	completed uint64        // puts acknowledged and delivered by the watch
	elapsed   time.Duration // from the first put until the watch delivered the last one acknowledged
}

func (c jsCeiling) rate() float64 { return float64(c.completed) / c.elapsed.Seconds() }

// measureJSCeiling measures jsCeiling on url for sc's nodes and flows,
// on a bucket of replicas and storage like the workers', with watches
// watches, for duration.
func measureJSCeiling(ctx context.Context, url string, sc scenario, replicas int, storage jetstream.StorageType,
	watches int, duration time.Duration) (c jsCeiling, err error) {
	pub, err := connect(url, "loadtest-ceiling")
	if err != nil {
		return c, err
	}
	defer pub.Close()
	js, err := jetstream.New(pub, jetstream.WithPublishAsyncMaxPending(ackedInFlight))
	if err != nil {
		return c, err
	}
	_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: ceilingBucket, History: 1,
		Storage: storage, Replicas: replicas})
	if err != nil {
		return c, fmt.Errorf("ceiling: create bucket: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		err = errors.Join(err, js.DeleteKeyValue(dctx, ceilingBucket))
	}()

	// The watches, one a worker, each on a connection of its own as a
	// worker's store is: every worker sees every write, so the job the
	// engine does for the workers delivers each write once to each.
	var delivered []*atomic.Uint64
	moved := make(chan struct{}, 1)
	for k := range watches {
		d, stop, werr := ceilingWatch(ctx, url, k, moved)
		if werr != nil {
			return c, werr
		}
		defer func() { err = errors.Join(err, stop()) }()
		delivered = append(delivered, d)
	}
	least := func() uint64 { // the revision every watch has delivered
		m := delivered[0].Load()
		for _, d := range delivered[1:] {
			m = min(m, d.Load())
		}
		return m
	}

	values := ceilingValues(sc)
	last := make([]uint64, sc.nodes)                    // each key's last write
	pending := make([]jetstream.PubAckFuture, sc.nodes) // each key's put in flight
	var acked, maxSeq uint64
	var failed error
	settle := func(i int) { // a key's put in flight, answered
		f := pending[i]
		if f == nil {
			return
		}
		pending[i] = nil
		select {
		case a := <-f.Ok():
			last[i], acked, maxSeq = a.Sequence, acked+1, max(maxSeq, a.Sequence)
		case e := <-f.Err():
			if failed == nil {
				failed = e
			}
		case <-ctx.Done():
		}
	}
	start := time.Now()
	end := start.Add(duration)
	for n := 0; time.Now().Before(end) && ctx.Err() == nil && failed == nil; n++ {
		i := n % sc.nodes
		settle(i) // a key's next put is conditional on its last write: it waits for it
		msg := &nats.Msg{Subject: "$KV." + ceilingBucket + "." + flowstate.NodeKey(uint64(i)), Data: values[(n/sc.nodes)%len(values)][i],
			Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(last[i], 10)}}}
		f, err := js.PublishMsgAsync(msg)
		if err != nil {
			return c, fmt.Errorf("ceiling: put: %w", err)
		}
		pending[i] = f
	}
	for i := range pending {
		settle(i)
	}
	if failed != nil {
		return c, fmt.Errorf("ceiling: a put failed: %w", failed)
	}
	deadline := time.NewTimer(requestTimeout)
	defer deadline.Stop()
	for least() < maxSeq {
		select {
		case <-moved:
		case <-deadline.C:
			return c, fmt.Errorf("ceiling: the watches did not deliver revision %d within %v (at %d)", maxSeq, requestTimeout, least())
		case <-ctx.Done():
			return c, ctx.Err()
		}
	}
	return jsCeiling{completed: acked, elapsed: time.Since(start)}, nil
}

// ceilingWatch starts watch k of the ceiling's bucket on a connection of
// its own: it stores the last revision delivered and signals moved. stop
// ends it.
func ceilingWatch(ctx context.Context, url string, k int, moved chan<- struct{}) (*atomic.Uint64, func() error, error) {
	wnc, err := connect(url, fmt.Sprintf("loadtest-ceiling-watch-%d", k))
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*atomic.Uint64, func() error, error) {
		wnc.Close()
		return nil, nil, fmt.Errorf("ceiling: watch %d: %w", k, err)
	}
	wjs, err := jetstream.New(wnc)
	if err != nil {
		return fail(err)
	}
	wkv, err := wjs.KeyValue(ctx, ceilingBucket)
	if err != nil {
		return fail(err)
	}
	watcher, err := wkv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return fail(err)
	}
	var delivered atomic.Uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range watcher.Updates() {
			if e != nil {
				delivered.Store(e.Revision())
				select {
				case moved <- struct{}{}:
				default:
				}
			}
		}
	}()
	stop := func() error {
		err := watcher.Stop()
		wnc.Close()
		<-done
		return err
	}
	return &delivered, stop, nil
}

// ceilingValues are the values a worker writes to the node keys for sc's
// reports: two rounds, so that a put changes its key's value.
func ceilingValues(sc scenario) [][][]byte {
	out := make([][][]byte, 2)
	for round := range out {
		out[round] = make([][]byte, sc.nodes)
		for i := range sc.nodes {
			out[round][i] = flowstate.AppendJSON(nil, loadgen.Flows(loadgen.Config{Nodes: sc.nodes, Flows: sc.flows}, i, uint64(round)))
		}
	}
	return out
}
