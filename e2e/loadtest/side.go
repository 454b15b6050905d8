package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// requestTimeout bounds one request of a side client.
const requestTimeout = 30 * time.Second

// sideClients run beside the ingest: clients that send reports as requests
// and time the acks, and one that sends gets in a loop and times them.
type sideClients struct {
	conns    []*nats.Conn
	stopping chan struct{}      // closed: send no more requests
	abandon  context.CancelFunc // gives up the requests in flight
	wg       sync.WaitGroup

	ack, get    latencies
	ackSent     atomic.Uint64 // reports sent as requests
	ackErrors   atomic.Uint64 // rejected, or no ack (dropped as a slow consumer, or given up)
	getErrors   atomic.Uint64
	getBytes    atomic.Int64 // size of the last aggregate a get returned
	firstErr    atomic.Pointer[error]
	getInterval time.Duration
}

// startSideClients starts ackClients clients, client g sending node g's
// reports (modulo the nodes) round after round, and a get client if gets.
func startSideClients(url string, p *payloads, ackClients int, gets bool, getInterval time.Duration) (*sideClients, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sideClients{stopping: make(chan struct{}), abandon: cancel, getInterval: getInterval}
	if ackClients > 0 {
		nc, err := connect(url, "loadtest-ack")
		if err != nil {
			s.close()
			return nil, err
		}
		s.conns = append(s.conns, nc)
		for g := range ackClients {
			s.wg.Go(func() { s.acks(ctx, nc, p, g%p.nodes) })
		}
	}
	if gets {
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

func (s *sideClients) stopped() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

func (s *sideClients) acks(ctx context.Context, nc *nats.Conn, p *payloads, node int) {
	for round := uint64(1); !s.stopped(); round++ {
		subject, body := p.of(node, round)
		s.ackSent.Add(1)
		t0 := time.Now()
		if err := s.request(ctx, nc, subject, body, nil); err != nil {
			s.ackErrors.Add(1)
			if nc.IsClosed() {
				return
			}
			continue
		}
		s.ack.add(time.Since(t0))
	}
}

func (s *sideClients) gets(ctx context.Context, nc *nats.Conn) {
	for !s.stopped() {
		t0 := time.Now()
		if err := s.request(ctx, nc, prefix+".state.get", nil, &s.getBytes); err != nil {
			s.getErrors.Add(1)
			if nc.IsClosed() {
				return
			}
			continue
		}
		s.get.add(time.Since(t0))
		if s.getInterval > 0 {
			select {
			case <-time.After(s.getInterval):
			case <-s.stopping:
			}
		}
	}
}

// request sends one request and checks that it was not answered with a
// service error; size, if set, gets the reply's size.
func (s *sideClients) request(ctx context.Context, nc *nats.Conn, subject string, body []byte, size *atomic.Int64) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, subject, body)
	if err == nil {
		if e := m.Header.Get(micro.ErrorHeader); e != "" {
			err = fmt.Errorf("%s: %s %s", subject, m.Header.Get(micro.ErrorCodeHeader), e)
		} else if size != nil {
			size.Store(int64(len(m.Data)))
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		s.firstErr.CompareAndSwap(nil, &err)
	}
	return err
}

// stop makes the clients send no more requests.
func (s *sideClients) stop() {
	select {
	case <-s.stopping:
	default:
		close(s.stopping)
	}
}

// wait waits up to grace for the requests in flight, then gives them up
// (they count as errors), and closes the connections.
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
		<-done // every request ends at once when abandoned
	}
	s.close()
}

func (s *sideClients) close() {
	s.abandon()
	for _, nc := range s.conns {
		nc.Close()
	}
}

// err returns the first error of a request, not counting given-up ones.
func (s *sideClients) err() error {
	if p := s.firstErr.Load(); p != nil {
		return *p
	}
	return nil
}
