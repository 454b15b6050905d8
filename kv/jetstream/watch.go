package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/protocol"
)

// errStartOver ends one pass of a watch that must start over.
var errStartOver = errors.New("jetstream: the watch must start over")

// Watch implements Watcher with an ordered push consumer of the bucket's
// stream: it delivers each key's last write (DeliverLastPerSubject), then
// every later write, in stream order. It makes another consumer from where
// it is when it has delivered nothing for stuckAfter while a write the
// store saw stored is ahead of it (its consumer's server is cut off or
// behind), and the client library does when two of the consumer's idle
// heartbeats are missed (consumerHeartbeats). A pass ends, and the next one
// begins with kv.OpReset, when the epoch key is deleted or changes, when
// sequence numbers go back (the bucket was recreated), when the periodic
// read of the epoch key finds it missing or changed (a purge is silent to
// consumers), when the server no longer has its consumer, or when the
// consumer gives up.
// fn runs on Watch's goroutine, which takes the messages from the
// subscription's queue, where the connection's reader puts them.
func (s *Store) Watch(ctx context.Context, fn func(kv.Event)) error {
	wait := s.cfg.ProbeInterval
	w := &watching{}         // what this watch remembers for a store that forgets (forgotten.go)
	var failed int           // passes in a row that ended in an error
	var lastFailed time.Time // when the last one did
	for {
		err := s.watchPass(ctx, fn, w)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errStartOver) {
			wait = s.cfg.ProbeInterval
			continue
		}
		s.log.Warn("watch interrupted, starting over", slog.String("bucket", s.cfg.Bucket), slog.Any("err", err))
		if s.cfg.Clock.Since(lastFailed) > time.Minute {
			failed = 0
		}
		if failed, lastFailed = failed+1, s.cfg.Clock.Now(); failed%switchAfter == 0 {
			s.tryAnotherServer(ctx, err)
		}
		if err := clock.Sleep(ctx, s.cfg.Clock, wait); err != nil {
			return err
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// watchPass runs one pass of Watch, from kv.OpReset until it must start over
// (errStartOver), fails, or ctx ends.
func (s *Store) watchPass(ctx context.Context, fn func(kv.Event), w *watching) error {
	if err := s.ensureBucket(ctx, false); err != nil {
		return err
	}
	ep, err := s.currentEpoch(ctx)
	if err != nil {
		return err
	}
	epoch := ep.name
	if err := s.startOverReturned(ctx, w, ep); err != nil {
		return err
	}
	if err := s.startOverWentBack(ctx, w, ep); err != nil {
		return err
	}
	if err := s.startOverForgotten(ctx, w, epoch); err != nil {
		return err
	}
	if err := s.startOverBelowKnown(ctx, epoch); err != nil {
		return err
	}
	sub, err := s.subscribe(0)
	if err != nil {
		return s.wrap("watch", err)
	}
	defer func() { _ = sub.Unsubscribe() }() // the pass's last consumer
	alive := newConsumerCheck(sub)
	pending, err := sub.InitialConsumerPending()
	if err != nil {
		return s.wrap("watch", err)
	}
	// Writes stored between a purge and the epoch key's write that followed
	// it are below ep.seq: OpReset says so (see kv.OpReset).
	fn(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: epoch, Seq: epochStart(epoch, ep.seq)}})

	p := pass{epoch: epoch, pending: pending}
	defer func() { w.mark = p.advance(w.mark) }()
	s.storedSeq.Store(0) // what was stored before this pass may be of a bucket recreated since
	s.caughtUp(ctx, &p)  // asks how far the stream went, if the consumer has nothing to deliver
	var moved progress
	var replaceFailed int // attempts in a row to replace a stuck consumer that failed
	// The consumers replaced, let go on goroutines of their own: deleting
	// one on a server cut off waits for the request's timeout.
	var letGo sync.WaitGroup
	defer letGo.Wait()
	for {
		// Until the next read of the epoch key (CheckInterval), which a
		// steady stream of messages does not put off.
		check, cancel := clock.WithTimeout(ctx, s.cfg.Clock, s.cfg.CheckInterval)
		err := s.watchUntil(ctx, check, sub, &p, fn, w)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return err
		case s.epochChanged(ctx, epoch):
			return errStartOver
		}
		if !p.exact && p.need == 0 {
			// Nothing was delivered since the consumer caught up with what
			// its server held, and the store could not say how far the
			// stream went then: asked again.
			if queued, _, _ := sub.Pending(); queued == 0 && s.caughtUp(ctx, &p) {
				s.becameExact(&p, fn)
			}
		}
		if w.mark = p.advance(w.mark); s.forgotten(ctx, w.mark, epoch) != "" {
			if err := s.startOverForgotten(ctx, w, epoch); err != nil {
				return err
			}
		}
		if err := s.startOverLost(ctx, epoch); err != nil {
			return err
		}
		if s.consumerGone(ctx, sub, &p, &alive) {
			return errConsumerGone
		}
		stuck := s.watchStuck(sub, &p, &moved)
		if stuck == nil {
			continue
		}
		if !p.synced {
			return stuck // a consumer by sequence would not load the bucket as OpSynced says
		}
		// Make before break: the stuck consumer is kept until another one
		// is made, which takes the cluster's meta leader; after a partition
		// heals there may be none for a while, and the consumer kept may
		// then go on where it was.
		next, err := s.subscribe(p.last + 1)
		if err != nil {
			s.log.Warn("the watch is stuck and cannot make another consumer yet: keeping the one it has", slog.String("bucket", s.cfg.Bucket),
				slog.Any("stuck", stuck), slog.Any("err", err))
			if replaceFailed++; replaceFailed%switchAfter == 0 {
				s.tryAnotherServer(ctx, err)
			}
			continue
		}
		s.log.Warn("the watch was stuck: it goes on with another consumer", slog.String("bucket", s.cfg.Bucket), slog.Any("stuck", stuck))
		replaceFailed = 0
		stuckSub := sub
		letGo.Go(func() { _ = stuckSub.Unsubscribe() })
		sub, moved, alive = next, progress{}, newConsumerCheck(next)
	}
}

// errConsumerGone ends a pass whose consumer the server no longer has.
var errConsumerGone = errors.New("jetstream: the watch's consumer is gone from the server")

// consumerCheck is what a pass of Watch knows of its consumer on the
// server: its far-apart idle heartbeats (consumerHeartbeats) are late to
// tell that the server no longer has it (the stream was deleted, a server
// restarted and lost it), so the watch asks the server once its consumer
// has been silent for two heartbeats (Config.Heartbeat).
type consumerCheck struct {
	name     string    // the consumer's name; "" if not known
	consumed uint64    // the consumer's sequence number last seen
	heard    time.Time // when it last moved, or the server was last asked
}

func newConsumerCheck(sub *nats.Subscription) consumerCheck {
	var c consumerCheck
	if ci, err := sub.ConsumerInfo(); err == nil {
		c.name = ci.Name
	}
	return c
}

// consumerGone reports whether the server says that it no longer has the
// pass's consumer, which has been silent for two heartbeats. It asks for
// at most a heartbeat: no answer (a partition) is no news, and the
// consumer may go on once the partition heals.
func (s *Store) consumerGone(ctx context.Context, sub *nats.Subscription, p *pass, c *consumerCheck) bool {
	now := s.cfg.Clock.Now()
	if p.consumed != c.consumed || c.heard.IsZero() {
		c.consumed, c.heard = p.consumed, now
		return false
	}
	if now.Sub(c.heard) < 2*s.cfg.Heartbeat {
		return false
	}
	c.heard = now
	if c.name != "" {
		qctx, cancel := context.WithTimeout(ctx, s.cfg.Heartbeat)
		_, err := s.js.Consumer(qctx, s.stream, c.name)
		cancel()
		if !errors.Is(err, natsjs.ErrConsumerNotFound) && !errors.Is(err, natsjs.ErrStreamNotFound) {
			return false // the server has it, or cannot say now
		}
	}
	// The client library may have made another consumer in its place (a
	// gap in its sequence numbers): the subscription knows which.
	ci, err := sub.ConsumerInfo()
	switch {
	case err == nil:
		c.name = ci.Name
		return false
	case errors.Is(err, nats.ErrConsumerNotFound), errors.Is(err, nats.ErrStreamNotFound):
		return true
	}
	return false
}

// subscribe makes the consumer of a pass of Watch: from the bucket's last
// write of each key if from is 0, else from sequence number from. It is a
// synchronous subscription: the connection's reader puts each message in
// its queue, and the watch's loop takes it from there, with no goroutine
// in between; the server's flow control is answered as the loop takes
// messages, and two missed idle heartbeats recreate the consumer (those
// heartbeats are far apart, and the server keeps the consumer while no one
// listens, so that it outlasts a partition: consumerHeartbeats).
func (s *Store) subscribe(from uint64) (*nats.Subscription, error) {
	start := nats.DeliverLastPerSubject()
	if from > 0 {
		start = nats.StartSequence(from)
	}
	return s.legacy.SubscribeSync(s.prefix+">",
		nats.BindStream(s.stream),
		nats.OrderedConsumer(),
		start,
		nats.IdleHeartbeat(consumerHeartbeats*s.cfg.Heartbeat),
		nats.InactiveThreshold(consumerKept*s.cfg.Heartbeat),
	)
}

// A watch's consumer is on one server of the stream's, which delivers to
// the watch's server over a route. When a partition cuts that route, the
// consumer pauses (no one listens to what it delivers) and goes on where
// it was once the route is back, with no request to JetStream; a consumer
// that the client recreates needs the cluster's meta leader, and a server
// that comes back from a partition makes the meta leader step down (its
// Raft term went up while it was alone), so that no consumer can be
// created for an election timeout after the heal (4 to 9 s). So the
// consumer's idle heartbeats, whose loss makes the client recreate it, are
// consumerHeartbeats heartbeats apart (two of them lost: 30 s by default),
// and the server keeps it for consumerKept heartbeats with no one
// listening (a minute by default; a consumer whose deletion failed is gone
// then). Neither waits for those heartbeats: a consumer that the server no
// longer has is found by asking after two silent heartbeats
// (consumerGone), and one stuck (cut off, or on a server whose stream is
// behind) by watchStuck, once a write the store saw stored is ahead of the
// watch and it has delivered nothing for stuckAfter.
const (
	consumerHeartbeats = 15
	consumerKept       = 60
)

// progress is when a pass last delivered a write, or last had nothing
// stored ahead of it.
type progress struct {
	last  uint64
	since time.Time
}

// watchStuck returns an error once the pass has delivered nothing for
// stuckAfter, with nothing waiting in its subscription, while a write the
// store saw stored is ahead of it: what its consumer reads does not move,
// as on a server cut off from the stream's leader, or whose stream is
// behind, or whose store failed. watchPass then replaces the consumer.
func (s *Store) watchStuck(sub *nats.Subscription, p *pass, pr *progress) error {
	now := s.cfg.Clock.Now()
	ahead := s.storedSeq.Load()
	queued, _, _ := sub.Pending()
	if ahead <= p.last || p.last != pr.last || queued > 0 || pr.since.IsZero() {
		pr.last, pr.since = p.last, now
		return nil
	}
	if d := now.Sub(pr.since); d >= s.stuckAfter() {
		return fmt.Errorf("jetstream: the watch delivered nothing for %v, at revision %d, while revision %d was stored", d.Round(time.Millisecond), p.last, ahead)
	}
	return nil
}

// pass is what a pass of Watch has delivered.
type pass struct {
	epoch    string
	last     uint64 // sequence number of the last write delivered
	synced   bool   // the store's content has been delivered
	exact    bool   // what was delivered is the store's content as of last
	consumed uint64 // the consumer's sequence number of the last message
	pending  uint64 // what the consumer had left to deliver then
	// A revision the stream's leader numbered after the watch last skipped
	// one: caught up once it is delivered (caughtUp); 0 until asked.
	need uint64
	// The last write delivered: its subject, time and value.
	lastSubject string
	lastTime    time.Time
	lastData    []byte
}

// advance returns mark moved on to the pass's last write, if that is later
// in mark's epoch, or of another epoch.
func (p *pass) advance(mark watermark) watermark {
	if p.last == 0 || p.epoch == mark.epoch && p.last <= mark.seq {
		return mark
	}
	return watermark{epoch: p.epoch, seq: p.last, subject: p.lastSubject, time: p.lastTime, data: p.lastData}
}

// watchUntil delivers the subscription's messages until check ends (nil)
// or the pass must end (its error); ctx is the pass's.
func (s *Store) watchUntil(ctx, check context.Context, sub *nats.Subscription, p *pass, fn func(kv.Event), w *watching) error {
	for check.Err() == nil {
		m, err := sub.NextMsgWithContext(check)
		if err != nil {
			if check.Err() != nil {
				return nil
			}
			return fmt.Errorf("jetstream: the watch's consumer closed: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			continue // not a stream message
		}
		if meta.Sequence.Consumer <= p.consumed {
			// The consumer was recreated (a reconnection, a server that
			// came back): what it delivers may be another history, if the
			// store forgot. Before it is applied, the stream must still
			// hold the last write delivered.
			w.mark = p.advance(w.mark)
			if err := s.startOverForgotten(ctx, w, p.epoch); err != nil {
				return err
			}
		}
		p.consumed = meta.Sequence.Consumer
		seq := meta.Sequence.Stream
		if err := s.startOverLost(ctx, p.epoch); err != nil {
			return err
		}
		if err := s.startOverOverwritten(ctx, p.epoch, seq, s.known.hash(m.Subject, m.Data)); err != nil {
			return err
		}
		if seq <= p.last {
			s.log.Warn("sequence numbers went back: the bucket was recreated", slog.String("bucket", s.cfg.Bucket),
				slog.Uint64("revision", seq), slog.Uint64("last", p.last))
			return errStartOver
		}
		key := strings.TrimPrefix(m.Subject, s.prefix)
		op := kv.OpPut
		if isDeletion(m.Header) {
			op = kv.OpDelete
		}
		if key == s.cfg.EpochKey && (op == kv.OpDelete || string(m.Data) != p.epoch) {
			s.log.Info("the epoch key changed", slog.String("bucket", s.cfg.Bucket), slog.String("epoch", p.epoch))
			return errStartOver
		}
		if seq != p.last+1 {
			p.need = 0 // a revision the watch skipped may have been replaced after the one asked for
		}
		inTurn := p.synced && p.exact && seq == p.last+1
		p.last, p.lastSubject, p.lastTime, p.lastData = seq, m.Subject, meta.Timestamp, m.Data
		p.pending = meta.NumPending
		if p.synced {
			// Exact stays so while every write is delivered in turn, and
			// becomes so again once the watch has caught up with the stream.
			p.exact = inTurn || s.caughtUp(ctx, p)
		}
		ev := kv.Event{Op: op, Key: key, Revision: kv.Revision{Epoch: p.epoch, Seq: seq}, Time: meta.Timestamp, Exact: p.synced && p.exact}
		if op == kv.OpPut {
			ev.Value = m.Data
		}
		fn(ev)
		if !p.synced && s.caughtUp(ctx, p) {
			s.becameExact(p, fn)
		}
	}
	return nil
}

// caughtUp reports whether the watch has caught up with the stream: its
// consumer has nothing more to deliver, and it has delivered a revision
// the stream's leader numbered after the watch last skipped a revision.
//
// A consumer with nothing pending has delivered what its server holds,
// which is not the stream's content as of the last write delivered when
// that server is catching up with the others (a partition healed, a
// restart): it is sent what the stream holds, without the writes replaced
// meanwhile, so it holds none of a key's writes between the one it had
// and the replacement it has not been sent yet, and a watch that skipped
// them shows a state the store never had. Every write the leader numbers
// after the watch skipped a revision is numbered after the replacement of
// that revision's write (which the leader stored before it dropped the
// write replaced), so once the watch has delivered it, and nothing is
// pending, what it delivered is the store's content. The revision is
// asked for once per skip, with the read barrier (LastRevision), shared
// with the gets waiting at once.
func (s *Store) caughtUp(ctx context.Context, p *pass) bool {
	if p.pending > 0 {
		return false
	}
	if p.need == 0 {
		rev, err := s.LastRevision(ctx)
		if err != nil {
			s.log.Debug("the watch could not tell how far the stream went", slog.String("bucket", s.cfg.Bucket), slog.Any("err", err))
			return false
		}
		p.need = max(rev.Seq, 1)
	}
	return p.last >= p.need
}

// becameExact notes that the pass's watch has caught up with the stream,
// and says so with OpSynced on its first time.
func (s *Store) becameExact(p *pass, fn func(kv.Event)) {
	first := !p.synced
	p.synced, p.exact = true, true
	if first {
		fn(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: p.epoch, Seq: p.last}, Exact: true})
	}
}

// epochChanged reads the epoch key: it reports true if the key is missing
// or holds another epoch, and false if it holds epoch or cannot be read.
func (s *Store) epochChanged(ctx context.Context, epoch string) bool {
	e, err := s.Get(ctx, s.cfg.EpochKey)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		s.log.Info("the epoch key is gone: the bucket was wiped", slog.String("bucket", s.cfg.Bucket), slog.String("epoch", epoch))
		return true
	case err != nil:
		// A bucket that is gone is recreated by the next pass; any other
		// failure is JetStream being unavailable, which the watch outlasts.
		return errors.Is(err, natsjs.ErrStreamNotFound) || errors.Is(err, natsjs.ErrBucketNotFound)
	case string(e.Value) != epoch:
		attrs := []any{slog.String("bucket", s.cfg.Bucket), slog.String("epoch", epoch)}
		if protocol.ValidEpoch(e.Value) {
			attrs = append(attrs, slog.String("new_epoch", string(e.Value)))
		} else {
			attrs = append(attrs, slog.Int("new_epoch_bytes", len(e.Value))) // no epoch: never logged
		}
		s.log.Info("the epoch key changed", attrs...)
		return true
	}
	return false
}

// isDeletion reports whether a bucket message is a delete or purge marker
// (or a marker the server left when a key expired).
func isDeletion(h nats.Header) bool {
	if len(h) == 0 {
		return false
	}
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	switch h.Get("Nats-Marker-Reason") {
	case "MaxAge", "Purge", "Remove":
		return true
	}
	return false
}
