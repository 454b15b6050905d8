package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"flowstate/kv"
)

// DefaultWindow is Config.Window's default.
const DefaultWindow = 256

// asyncPuts are the store's puts in flight (PutAsync): at most Window, each
// answered once, by the server's acknowledgement, its error, its timeout
// (OpTimeout) or the connection's loss.
type asyncPuts struct {
	js    natsjs.JetStream // publishes with the handlers below
	slots chan struct{}    // one token per put in flight
	mu    sync.Mutex       // guards byMsg
	byMsg map[*nats.Msg]*asyncPut
	pool  sync.Pool
}

// asyncPut is one put in flight; its message is what nats.go hands back.
type asyncPut struct {
	msg  nats.Msg
	key  string
	done func(kv.Revision, error)
}

// newAsyncPuts returns the async publisher of s: no retry of a put that
// found no responders (a retry from a timer could store it after a later
// put), every acknowledgement awaited for at most OpTimeout.
func newAsyncPuts(s *Store) (*asyncPuts, error) {
	a := &asyncPuts{slots: make(chan struct{}, s.cfg.Window), byMsg: make(map[*nats.Msg]*asyncPut, s.cfg.Window)}
	a.pool.New = func() any { return &asyncPut{} }
	js, err := natsjs.New(s.nc,
		// nats.go stalls a publish past this; the slots block before it.
		natsjs.WithPublishAsyncMaxPending(s.cfg.Window+1),
		natsjs.WithPublishAsyncTimeout(s.cfg.OpTimeout),
		natsjs.WithPublishAsyncAckHandler(func(_ natsjs.JetStream, m *nats.Msg, ack *natsjs.PubAck) {
			a.finish(m, kv.Revision{Epoch: s.lastEpoch(), Seq: ack.Sequence}, nil)
		}),
		natsjs.WithPublishAsyncErrHandler(func(_ natsjs.JetStream, m *nats.Msg, err error) {
			p := a.take(m)
			if p == nil {
				return
			}
			// Whatever the error (no answer in time, connection lost, no
			// stream, an error from the server), the write is not known to
			// be stored: the caller answers that it is unavailable.
			if unavailable(err) || errors.Is(err, natsjs.ErrAsyncPublishTimeout) {
				s.markDown(err)
			}
			a.release(p, kv.Revision{}, fmt.Errorf("%w: put %s: %w", kv.ErrUnavailable, p.key, err))
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	a.js = js
	return a, nil
}

func (a *asyncPuts) take(m *nats.Msg) *asyncPut {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.byMsg[m]
	delete(a.byMsg, m)
	return p
}

func (a *asyncPuts) finish(m *nats.Msg, rev kv.Revision, err error) {
	if p := a.take(m); p != nil {
		a.release(p, rev, err)
	}
}

// release frees p's slot and answers it.
func (a *asyncPuts) release(p *asyncPut, rev kv.Revision, err error) {
	done := p.done
	p.done, p.msg.Data, p.key = nil, nil, ""
	a.pool.Put(p)
	<-a.slots
	done(rev, err)
}

// PutAsync implements flowstate.AsyncPutter: it publishes a put of key to
// the bucket's stream and calls done with the stream's answer, within
// OpTimeout. At most Window puts are in flight: it blocks past that, until
// ctx ends. Nothing is published while the connection is down or while a
// probe has not found JetStream back (the error wraps kv.ErrUnavailable):
// the client's reconnect buffer would store such a put later, after the
// caller was told it failed.
func (s *Store) PutAsync(ctx context.Context, key string, value []byte, done func(kv.Revision, error)) error {
	if !validKey(key) {
		return fmt.Errorf("jetstream: put %s: invalid key", key)
	}
	if key == s.cfg.EpochKey || key == s.cfg.ProbeKey {
		return fmt.Errorf("jetstream: put %s: the key is reserved by the store", key)
	}
	a := s.async
	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: put %s: %w", kv.ErrUnavailable, key, ctx.Err())
	}
	if err := s.writable(); err != nil {
		<-a.slots
		return fmt.Errorf("%w: put %s: %v", kv.ErrUnavailable, key, err)
	}
	p := a.pool.Get().(*asyncPut)
	// nats.go copies the data into its buffer as it publishes; the header
	// stays empty, so that the client adds nothing per put.
	p.msg = nats.Msg{Subject: s.subject(key), Data: value}
	p.key, p.done = key, done
	a.mu.Lock()
	a.byMsg[&p.msg] = p
	a.mu.Unlock()
	if _, err := a.js.PublishMsgAsync(&p.msg, natsjs.WithRetryAttempts(0)); err != nil {
		if a.take(&p.msg) == nil {
			return nil // already answered by a handler
		}
		p.done, p.msg.Data = nil, nil
		a.pool.Put(p)
		<-a.slots
		err = s.wrap("put "+key, err)
		if errors.Is(err, kv.ErrUnavailable) {
			s.markDown(err)
		}
		return err
	}
	return nil
}
