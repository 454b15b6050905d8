package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/internal/latency"
	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/protocol"
)

// requestTimeout bounds one get of a side client.
const requestTimeout = 30 * time.Second

// ackTimeout bounds one acknowledged report of a side client: a report the
// worker dropped as a slow consumer fails after it.
const ackTimeout = 10 * time.Second

// sideClients run beside the ingest: a generator of nodes of their own
// sending reports as requests (timing the acks), and a client that sends
// gets in a loop and times them.
type sideClients struct {
	conns    []*nats.Conn
	stopping context.Context    // done: send no more gets
	stop     context.CancelFunc // ends stopping
	abandon  context.CancelFunc // gives up the gets in flight
	wg       sync.WaitGroup

	acks   *loadgen.Generator // nil without ack clients
	ackRes loadgen.Result     // set once acksOK is closed
	acksOK chan struct{}      // closed when the acks' Run returned

	get         latency.Recorder
	getErrors   atomic.Uint64
	getBytes    atomic.Int64 // size of the last aggregate a get returned
	firstErr    atomic.Pointer[error]
	getInterval time.Duration
}

// sideOptions configure the side clients of one measurement.
type sideOptions struct {
	ackClients  int           // acked reports in flight, one node each
	firstNode   int           // the ack clients' first node, after the publisher's
	flows       int           // per node
	duration    time.Duration // of the acks
	gets        bool
	getInterval time.Duration
}

// startSideClients starts the ack clients, nodes o.firstNode on, each with
// one report in flight for o.duration, and a get client if o.gets.
func startSideClients(ctx context.Context, url string, o sideOptions) (*sideClients, error) {
	ctx, cancel := context.WithCancel(ctx)
	stopping, stop := context.WithCancel(ctx)
	s := &sideClients{stopping: stopping, stop: stop, abandon: cancel, getInterval: o.getInterval, acksOK: make(chan struct{})}
	if o.ackClients > 0 {
		nc, err := connect(url, "loadtest-ack")
		if err != nil {
			s.close()
			return nil, err
		}
		s.conns = append(s.conns, nc)
		s.acks, err = loadgen.New(nc, loadgen.Config{FirstNode: o.firstNode, Nodes: o.ackClients, Flows: o.flows,
			Duration: o.duration, InFlight: o.ackClients, Timeout: ackTimeout})
		if err != nil {
			s.close()
			return nil, err
		}
		s.wg.Go(func() {
			defer close(s.acksOK)
			s.ackRes = s.acks.Run(ctx)
		})
	} else {
		close(s.acksOK)
	}
	if o.gets {
		nc, err := connect(url, "loadtest-get")
		if err != nil {
			s.close()
			return nil, err
		}
		s.conns = append(s.conns, nc)
		s.wg.Go(func() { s.gets(ctx, nc) })
	}
	return s, nil
}

// ackResult waits for the ack clients' run to end (each report bounded by
// ackTimeout) and returns it.
func (s *sideClients) ackResult() loadgen.Result {
	<-s.acksOK
	return s.ackRes
}

func (s *sideClients) gets(ctx context.Context, nc *nats.Conn) {
	for s.stopping.Err() == nil {
		t0 := time.Now()
		if err := s.request(ctx, nc); err != nil {
			s.getErrors.Add(1)
			if nc.IsClosed() {
				return
			}
			continue
		}
		s.get.Record(time.Since(t0))
		if s.getInterval > 0 {
			select {
			case <-time.After(s.getInterval):
			case <-s.stopping.Done():
			}
		}
	}
}

// request sends one get and checks that it was not answered with a service
// error.
func (s *sideClients) request(ctx context.Context, nc *nats.Conn) error {
	n, getErr, err := getSize(ctx, nc)
	switch {
	case err == nil && getErr != "":
		err = errors.New(getErr)
	case err == nil:
		s.getBytes.Store(int64(n))
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		s.firstErr.CompareAndSwap(nil, &err)
	}
	return err
}

// getSize sends one get, bounded by requestTimeout, and returns the size of
// the aggregate, or the service error it was answered with ("<code>
// <reason>"); err is for a get that got no answer.
func getSize(ctx context.Context, nc *nats.Conn) (size int, serviceErr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	subject := protocol.SubjectsOf(prefix).Get
	m, err := nc.RequestWithContext(ctx, subject, nil)
	if err != nil {
		return 0, "", fmt.Errorf("get on %s: %w", subject, err)
	}
	if e := m.Header.Get(protocol.HeaderError); e != "" {
		return 0, m.Header.Get(protocol.HeaderErrorCode) + " " + e, nil
	}
	return len(m.Data), "", nil
}

// wait waits up to grace for the gets in flight, then gives them up (they
// count as errors), waits for the acks' run, and closes the connections.
func (s *sideClients) wait(grace time.Duration) {
	s.stop()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		s.abandon()
		<-done // every get ends at once when abandoned; acks within ackTimeout
	}
	s.close()
}

func (s *sideClients) close() {
	s.abandon()
	for _, nc := range s.conns {
		nc.Close()
	}
}

// err returns the first error of a get or an acknowledged report, not
// counting given-up gets.
func (s *sideClients) err() error {
	if p := s.firstErr.Load(); p != nil {
		return *p
	}
	select {
	case <-s.acksOK:
		return s.ackRes.FirstError
	default:
		return nil
	}
}
