package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/protocol"
)

// relayBucket is the bucket of the relay's puts, deleted after each measure.
const relayBucket = "flowstate_relay"

// relay does the JetStream backend's job for acknowledged reports with
// nothing of ours in between: one queue subscriber on the heartbeat
// subjects that, for each report, makes a worker's put of the node's value
// to the node's key, conditional on the key's last write as its own watch
// of the bucket delivered it, through nats.go's asynchronous publish, and
// replies once the stream acknowledged the put and that watch delivered
// it, as a worker acks a report once its watch applied it. The load is the
// acked scenarios' (loadgen), so its rate compares with the worker's.
//
// It does less than a worker: it neither decodes a report nor encodes a
// value (each node's value is made before the run), keeps no aggregate,
// checks no limit and no stale rule, and answers a refused condition 503
// instead of sending again. Its puts and its watch share one connection,
// its subscription has another, as a worker's. It runs pipelined, as the
// worker does, or serial, as the simplest handler would.
type relay struct {
	subConn, storeConn *nats.Conn
	js                 jetstream.JetStream
	watcher            jetstream.KeyWatcher
	values             [][]byte // a node's value, by its id modulo their number
	// serial: each report's put is acknowledged and watched before the
	// next report is taken, as a handler that waits would; otherwise puts
	// are pipelined, as a worker's are.
	serial bool

	mu        sync.Mutex
	moved     *sync.Cond
	last      map[string]uint64 // each key's last write the watch delivered
	delivered uint64            // the last write the watch delivered
	stopped   bool              // the watch ended

	puts    chan relayPut // the puts in flight, in the order sent
	watched chan struct{} // closed when the watch's goroutine returns
	done    chan struct{} // closed when the answering goroutine returns
}

// relayPut is a report's put in flight.
type relayPut struct {
	report *nats.Msg
	ack    jetstream.PubAckFuture
}

// measureRelay runs the relay (serial or pipelined) on url, on a bucket of replicas and storage
// like the workers', and the acked load of sc against it for duration; it
// returns the load's result.
func measureRelay(ctx context.Context, url string, sc scenario, replicas int, storage jetstream.StorageType,
	duration time.Duration, serial bool) (res loadgen.Result, err error) {
	rl, err := startRelay(ctx, url, sc, replicas, storage, serial)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, rl.stop()) }()
	nc, err := connect(url, "loadtest-relay-load")
	if err != nil {
		return res, err
	}
	defer nc.Close()
	g, err := loadgen.New(nc, loadgen.Config{Nodes: sc.nodes, Flows: sc.flows, Duration: duration,
		InFlight: ackedInFlight, Timeout: requestTimeout})
	if err != nil {
		return res, err
	}
	res = g.Run(ctx)
	if res.Acked == 0 {
		return res, fmt.Errorf("relay: no report acknowledged (first error: %v)", res.FirstError)
	}
	return res, nil
}

// startRelay creates the relay's bucket and starts the relay: its watch,
// its answering goroutine and its subscription.
func startRelay(ctx context.Context, url string, sc scenario, replicas int, storage jetstream.StorageType, serial bool) (*relay, error) {
	rl := &relay{serial: serial, last: make(map[string]uint64), puts: make(chan relayPut, ackedInFlight),
		watched: make(chan struct{}), done: make(chan struct{})}
	rl.moved = sync.NewCond(&rl.mu)
	rl.values = ceilingValues(sc)[0]
	var err error
	if rl.storeConn, err = connect(url, "loadtest-relay-store"); err != nil {
		return nil, err
	}
	fail := func(err error) (*relay, error) {
		rl.storeConn.Close()
		return nil, fmt.Errorf("relay: %w", err)
	}
	if rl.js, err = jetstream.New(rl.storeConn, jetstream.WithPublishAsyncMaxPending(ackedInFlight)); err != nil {
		return fail(err)
	}
	kv, err := rl.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: relayBucket, History: 1, Storage: storage, Replicas: replicas})
	if err != nil {
		return fail(fmt.Errorf("create bucket: %w", err))
	}
	if rl.watcher, err = kv.WatchAll(ctx, jetstream.UpdatesOnly()); err != nil {
		return fail(errors.Join(err, rl.deleteBucket()))
	}
	go rl.watch()
	go rl.answer()
	if rl.subConn, err = connect(url, "loadtest-relay"); err == nil {
		_, err = rl.subConn.QueueSubscribe(protocol.SubjectsOf("").Heartbeats, "loadtest-relay", rl.onReport)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("relay: subscribe: %w", err), rl.stop())
	}
	return rl, nil
}

// onReport sends the put of a report, on the subscription's goroutine.
func (rl *relay) onReport(m *nats.Msg) {
	id, err := strconv.ParseUint(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], 10, 64)
	if err != nil {
		relayRefuse(m, "400", err)
		return
	}
	key := flowstate.NodeKey(id)
	rl.mu.Lock()
	cond := rl.last[key]
	rl.mu.Unlock()
	put := &nats.Msg{Subject: "$KV." + relayBucket + "." + key, Data: rl.values[id%uint64(len(rl.values))],
		Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(cond, 10)}}}
	f, err := rl.js.PublishMsgAsync(put)
	if err != nil {
		relayRefuse(m, "503", err)
		return
	}
	if rl.serial {
		rl.settle(relayPut{report: m, ack: f})
		return
	}
	rl.puts <- relayPut{report: m, ack: f}
}

// answer replies to the reports in the order their puts were sent.
func (rl *relay) answer() {
	defer close(rl.done)
	for p := range rl.puts {
		rl.settle(p)
	}
}

// settle replies to p's report once the stream acknowledged its put and
// the watch delivered it.
func (rl *relay) settle(p relayPut) {
	select {
	case a := <-p.ack.Ok():
		rl.mu.Lock()
		for rl.delivered < a.Sequence && !rl.stopped {
			rl.moved.Wait()
		}
		seen := rl.delivered >= a.Sequence
		rl.mu.Unlock()
		if !seen {
			relayRefuse(p.report, "503", errors.New("the watch ended"))
			return
		}
		_ = p.report.Respond(nil)
	case err := <-p.ack.Err():
		relayRefuse(p.report, "503", err)
	}
}

// watch follows the bucket until the watcher stops.
func (rl *relay) watch() {
	defer close(rl.watched)
	for e := range rl.watcher.Updates() {
		if e == nil {
			continue
		}
		rl.mu.Lock()
		rl.last[e.Key()] = e.Revision()
		rl.delivered = max(rl.delivered, e.Revision())
		rl.moved.Broadcast()
		rl.mu.Unlock()
	}
	rl.mu.Lock()
	rl.stopped = true
	rl.moved.Broadcast()
	rl.mu.Unlock()
}

// stop ends the subscription (its handler returned), then the answers,
// the watch and the bucket.
func (rl *relay) stop() error {
	var err error
	if rl.subConn != nil {
		closed := make(chan struct{})
		rl.subConn.SetClosedHandler(func(*nats.Conn) { close(closed) })
		if err = rl.subConn.Drain(); err == nil {
			select {
			case <-closed:
			case <-time.After(requestTimeout):
				err = errors.New("relay: the subscription did not drain")
			}
		}
		rl.subConn.Close()
	}
	close(rl.puts) // nothing sends on it once the subscription's handler has returned
	<-rl.done
	err = errors.Join(err, rl.watcher.Stop())
	<-rl.watched
	err = errors.Join(err, rl.deleteBucket())
	rl.storeConn.Close()
	return err
}

func (rl *relay) deleteBucket() error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	return rl.js.DeleteKeyValue(ctx, relayBucket)
}

// relayRefuse answers a report with a service error, as a worker does.
func relayRefuse(m *nats.Msg, code string, err error) {
	reply := nats.NewMsg(m.Reply)
	reply.Header.Set(protocol.HeaderErrorCode, code)
	reply.Header.Set(protocol.HeaderError, err.Error())
	_ = m.RespondMsg(reply)
}
