package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
)

// errStoreClosed answers the puts in flight when the store closes.
var errStoreClosed = errors.New("the store is closed")

// asyncPuts are the store's puts in flight (PutAsync): at most Window, each
// answered once, by the stream's acknowledgement, its error, the lack of one
// within the timeout, the connection's loss or the store's Close.
//
// The puts go out on core NATS, never retried, each with a reply subject of
// its own under one wildcard subscription: <inbox>.<slot>.<generation>. A
// slot takes a new generation whenever a put ends, so an answer that
// arrives after its put ended (given up, or answered already: around a
// stream leader's change, two servers that each take themselves for the
// leader may both answer one put) is recognised and dropped instead of
// being taken for a later put's. Acknowledgements are read in place
// (pubAckSeq); one ticker bounds every put's wait.
type asyncPuts struct {
	nc      *nats.Conn
	timeout time.Duration
	clock   clock.Clock   // the puts' deadlines and the ticker that bounds their waits
	down    func(error)   // called when a put finds JetStream unavailable
	epoch   func() string // the epoch a stored put is acknowledged in
	stored  func(uint64)  // called with each stored put's sequence number
	known   *knownWrites  // told each stored put

	prefix string // <inbox>.
	sub    *nats.Subscription
	status chan nats.Status
	free   chan int32 // the slots not in use; a put takes one
	stop   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex // guards slots and closed
	slots  []putSlot
	closed bool

	expired []endedPut // the ticker's scratch
}

// putSlot is one place of the window.
type putSlot struct {
	reply    string // prefix + slot + "." + gen
	gen      uint64
	busy     bool
	sent     sentPut
	done     kv.PutReceiver
	deadline time.Time
}

// sentPut is what a put's acknowledgement is checked against.
type sentPut struct {
	key     string
	written uint64 // the hash of the put's subject and value (knownWrites)
	// The epoch and the highest sequence number recorded in it when the
	// put was sent (knownWrites.numbered).
	epoch string
	top   uint64
}

// endedPut is a put taken out of its slot, to be answered.
type endedPut struct {
	slot int32
	key  string
	done kv.PutReceiver
}

// newAsyncPuts subscribes to the replies of window puts on nc and starts
// the goroutines that bound their waits; close stops them.
func newAsyncPuts(nc *nats.Conn, window int, timeout time.Duration, clk clock.Clock, down func(error), epoch func() string, stored func(uint64), known *knownWrites) (*asyncPuts, error) {
	a := &asyncPuts{
		nc: nc, timeout: timeout, clock: clk, down: down, epoch: epoch, stored: stored, known: known,
		prefix: nc.NewInbox() + ".",
		free:   make(chan int32, window),
		stop:   make(chan struct{}),
		slots:  make([]putSlot, window),
	}
	for i := range a.slots {
		a.slots[i].reply = a.replyOf(i, 0)
		a.free <- int32(i)
	}
	sub, err := nc.Subscribe(a.prefix+">", a.onReply)
	if err != nil {
		return nil, fmt.Errorf("jetstream: subscribe to acknowledgements: %w", err)
	}
	a.sub = sub
	a.status = nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	a.wg.Go(a.expire)
	a.wg.Go(a.watchStatus)
	return a, nil
}

func (a *asyncPuts) replyOf(slot int, gen uint64) string {
	return a.prefix + strconv.Itoa(slot) + "." + strconv.FormatUint(gen, 10)
}

// put publishes value on subject as the put of key, with the headers hdr
// (nil: none), answered by done. It blocks while the window is full, until
// ctx ends; check runs once a slot is free, and an error from it fails the
// put before it is sent. An error returned means done will not be called.
func (a *asyncPuts) put(ctx context.Context, subject, key string, value []byte, hdr nats.Header, check func() error, done kv.PutReceiver) error {
	var slot int32
	select {
	case slot = <-a.free:
	case <-ctx.Done():
		return fmt.Errorf("%w: put %s: %w", kv.ErrUnavailable, key, ctx.Err())
	}
	if err := check(); err != nil {
		a.free <- slot
		return fmt.Errorf("%w: put %s: %v", kv.ErrUnavailable, key, err)
	}
	sent := sentPut{key: key, written: a.known.hash(subject, value), epoch: a.epoch()}
	sent.top = a.known.topOf(sent.epoch)
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.free <- slot
		return fmt.Errorf("%w: put %s: %w", kv.ErrUnavailable, key, errStoreClosed)
	}
	p := &a.slots[slot]
	p.busy, p.sent, p.done, p.deadline = true, sent, done, a.clock.Now().Add(a.timeout)
	reply, gen := p.reply, p.gen
	a.mu.Unlock()
	var err error
	if hdr == nil {
		err = a.nc.PublishRequest(subject, reply, value)
	} else {
		err = a.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: hdr, Data: value})
	}
	if err != nil {
		if _, d := a.take(slot, gen); d == nil {
			return nil // answered meanwhile (the connection was lost)
		}
		a.free <- slot
		return err
	}
	return nil
}

// take ends the put in slot if it is still the one of generation gen, and
// returns what was sent, and done; done is nil if it had ended already.
func (a *asyncPuts) take(slot int32, gen uint64) (sentPut, kv.PutReceiver) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if slot < 0 || int(slot) >= len(a.slots) {
		return sentPut{}, nil
	}
	p := &a.slots[slot]
	if !p.busy || p.gen != gen {
		return sentPut{}, nil
	}
	sent, done := p.sent, p.done
	a.endLocked(slot)
	return sent, done
}

// endLocked frees slot, under a new generation: whatever answer its put
// may still get is dropped.
func (a *asyncPuts) endLocked(slot int32) {
	p := &a.slots[slot]
	p.busy, p.sent, p.done = false, sentPut{}, nil
	p.gen++
	p.reply = a.replyOf(int(slot), p.gen)
}

// onReply answers the put that m acknowledges.
func (a *asyncPuts) onReply(m *nats.Msg) {
	slot, gen, ok := parseReply(m.Subject, a.prefix)
	if !ok {
		return
	}
	sent, done := a.take(slot, gen)
	key := sent.key
	if done == nil {
		return // given up, or answered, already
	}
	a.free <- slot
	seq, err := pubAckSeq(m)
	if err != nil && isWrongLastSequence(err) {
		refused := mismatch(fmt.Errorf("%w: put %s: %w", kv.ErrRevisionMismatch, key, err), err)
		if last, ok := kv.LastWriteOf(refused); ok {
			a.stored(last)
		}
		done.PutDone(kv.Revision{}, refused)
		return
	}
	if err != nil {
		// Whatever the error (no stream, an error from the server), the
		// write is not stored: the caller answers that it is unavailable.
		if unavailable(err) {
			a.down(err)
		}
		done.PutDone(kv.Revision{}, fmt.Errorf("%w: put %s: %w", kv.ErrUnavailable, key, err))
		return
	}
	a.stored(seq)
	if err := a.known.numbered(sent.epoch, sent.top, seq, "the put of ", key); err != nil {
		// Stored, in a stream that forgot acknowledged writes: the epoch
		// ends, and the next one has it if the stream keeps it.
		done.PutDone(kv.Revision{}, err)
		return
	}
	epoch := a.epoch()
	a.known.note(epoch, seq, sent.written) // a write recorded there already is the watch's to tell apart
	done.PutDone(kv.Revision{Epoch: epoch, Seq: seq}, nil)
}

// parseReply returns the slot and generation of a reply subject.
func parseReply(subject, prefix string) (int32, uint64, bool) {
	if len(subject) <= len(prefix) || subject[:len(prefix)] != prefix {
		return 0, 0, false
	}
	rest := subject[len(prefix):]
	for i := range len(rest) {
		if rest[i] != '.' {
			continue
		}
		slot, err1 := strconv.ParseUint(rest[:i], 10, 31)
		gen, err2 := strconv.ParseUint(rest[i+1:], 10, 64)
		return int32(slot), gen, err1 == nil && err2 == nil
	}
	return 0, 0, false
}

// expire fails the puts whose acknowledgement is late, until close.
func (a *asyncPuts) expire() {
	t := a.clock.NewTicker(max(a.timeout/8, 5*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case now := <-t.C():
			a.expired = a.endAll(a.expired[:0], func(p *putSlot) bool { return p.deadline.Before(now) })
			a.fail(a.expired, natsjs.ErrAsyncPublishTimeout, true)
		}
	}
}

// watchStatus fails every put in flight when the connection is lost: their
// acknowledgements, if any, went to the connection that is gone.
func (a *asyncPuts) watchStatus() {
	for {
		select {
		case <-a.stop:
			return
		case st, ok := <-a.status:
			if !ok {
				return
			}
			cause := nats.ErrDisconnected
			if st == nats.CLOSED {
				cause = nats.ErrConnectionClosed
			}
			a.fail(a.endAll(nil, func(*putSlot) bool { return true }), cause, true)
		}
	}
}

// endAll ends the puts in flight that match, renewing their slots, and
// appends them to dst.
func (a *asyncPuts) endAll(dst []endedPut, match func(*putSlot) bool) []endedPut {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.slots {
		p := &a.slots[i]
		if p.busy && match(p) {
			dst = append(dst, endedPut{slot: int32(i), key: p.sent.key, done: p.done})
			a.endLocked(int32(i))
		}
	}
	return dst
}

// fail answers ended puts with cause, marking JetStream down if asked.
func (a *asyncPuts) fail(ended []endedPut, cause error, down bool) {
	if len(ended) == 0 {
		return
	}
	if down {
		a.down(cause)
	}
	for i, e := range ended {
		a.free <- e.slot
		e.done.PutDone(kv.Revision{}, fmt.Errorf("%w: put %s: %w", kv.ErrUnavailable, e.key, cause))
		ended[i] = endedPut{}
	}
}

// close stops the goroutines and answers the puts still in flight.
func (a *asyncPuts) close() {
	a.mu.Lock()
	closed := a.closed
	a.closed = true
	a.mu.Unlock()
	if closed {
		return
	}
	close(a.stop)
	a.nc.RemoveStatusListener(a.status)
	_ = a.sub.Unsubscribe()
	a.wg.Wait()
	a.fail(a.endAll(nil, func(*putSlot) bool { return true }), errStoreClosed, false)
}

// ownKeyHeaders are the headers of puts conditional on their own key's
// last write, each a map with its one value: nats.go writes a message's
// headers out before PublishMsg returns, so a put's map serves the next
// put once PutAsync has returned, instead of a map and a slice a put.
var ownKeyHeaders = sync.Pool{New: func() any { return nats.Header{natsjs.ExpectedLastSubjSeqHeader: make([]string, 1)} }}

// PutAsync implements kv.AsyncPutter; it is the put that a state.Replica
// sends: it publishes a put of key to the bucket's stream, under cond
// (the headers Nats-Expected-Last-Subject-Sequence, and
// Nats-Expected-Last-Subject-Sequence-Subject for another key's), and
// calls done with the stream's answer, within OpTimeout; the stream's
// refusal of cond (wrong last sequence) wraps kv.ErrRevisionMismatch. At
// most Window puts are in flight: it blocks past that, until ctx ends.
// Nothing is published while the connection is down or while a probe has
// not found JetStream back (the error wraps kv.ErrUnavailable): the
// client's reconnect buffer would store such a put later, after the
// caller was told it failed.
func (s *Store) PutAsync(ctx context.Context, key string, value []byte, cond kv.Condition, done kv.PutReceiver) error {
	if !validKey(key) {
		return fmt.Errorf("jetstream: put %s: invalid key", key)
	}
	if key == s.cfg.EpochKey || key == s.cfg.ProbeKey {
		return fmt.Errorf("jetstream: put %s: the key is reserved by the store", key)
	}
	var hdr nats.Header
	switch {
	case cond == kv.NoCondition:
	case !validKey(cond.Key):
		return fmt.Errorf("jetstream: put %s: invalid condition key %q", key, cond.Key)
	case cond.Key == key:
		// A node's write: its headers are reused from put to put.
		hdr = ownKeyHeaders.Get().(nats.Header)
		hdr[natsjs.ExpectedLastSubjSeqHeader][0] = strconv.FormatUint(cond.Revision, 10)
		defer ownKeyHeaders.Put(hdr)
	default:
		hdr = nats.Header{natsjs.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(cond.Revision, 10)},
			natsjs.ExpectedLastSubjSeqSubjHeader: []string{s.subject(cond.Key)}}
	}
	err := s.async.put(ctx, s.subject(key), key, value, hdr, s.writable, done)
	if err != nil && !errors.Is(err, kv.ErrUnavailable) {
		err = s.wrap("put "+key, err)
		if errors.Is(err, kv.ErrUnavailable) {
			s.markDown(err)
		}
	}
	return err
}
