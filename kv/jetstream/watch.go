package jetstream

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/kv"
)

// errStartOver ends one pass of a watch that must start over.
var errStartOver = errors.New("jetstream: the watch must start over")

// Watch implements Watcher with an ordered push consumer of the bucket's
// stream: it delivers each key's last write (DeliverLastPerSubject), then
// every later write, in stream order, and recreates itself where it left
// off when it misses two idle heartbeats (a server died, the connection
// moved). A pass ends, and the next one begins with kv.OpReset, when the epoch
// key is deleted or changes, when sequence numbers go back (the bucket was
// recreated), when the periodic read of the epoch key finds it missing or
// changed (a purge is silent to consumers), or when the consumer gives up.
func (s *Store) Watch(ctx context.Context, fn func(kv.Event)) error {
	wait := s.cfg.ProbeInterval
	for {
		err := s.watchPass(ctx, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errStartOver) {
			wait = s.cfg.ProbeInterval
			continue
		}
		s.log.Warn("watch interrupted, starting over", slog.String("bucket", s.cfg.Bucket), slog.Any("err", err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// watchSub is one pass's subscription: its callback hands messages over to
// the pass's loop, or drops them once the pass is over.
type watchSub struct {
	ch     chan *nats.Msg
	done   chan struct{} // closed when the pass is over
	closed chan struct{} // closed when the subscription closes
	once   sync.Once
}

func (w *watchSub) deliver(m *nats.Msg) {
	select {
	case w.ch <- m:
	case <-w.done:
	}
}

// watchPass runs one pass of Watch, from kv.OpReset until it must start over
// (errStartOver), fails, or ctx ends.
func (s *Store) watchPass(ctx context.Context, fn func(kv.Event)) error {
	if err := s.ensureBucket(ctx, false); err != nil {
		return err
	}
	ep, err := s.currentEpoch(ctx)
	if err != nil {
		return err
	}
	epoch := ep.name
	w := &watchSub{ch: make(chan *nats.Msg, 256), done: make(chan struct{}), closed: make(chan struct{})}
	defer close(w.done)
	sub, err := s.legacy.Subscribe(s.prefix+">", w.deliver,
		nats.BindStream(s.stream),
		nats.OrderedConsumer(),
		nats.DeliverLastPerSubject(),
		nats.IdleHeartbeat(s.cfg.Heartbeat),
	)
	if err != nil {
		return s.wrap("watch", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	sub.SetClosedHandler(func(string) { w.once.Do(func() { close(w.closed) }) })
	pending, err := sub.InitialConsumerPending()
	if err != nil {
		return s.wrap("watch", err)
	}
	// Writes stored between a purge and the epoch key's write that followed
	// it are below ep.seq: OpReset says so (see kv.OpReset).
	fn(kv.Event{Op: kv.OpReset, Revision: kv.Revision{Epoch: epoch, Seq: ep.seq}})

	var (
		last   uint64 // sequence number of the last write delivered
		synced = pending == 0
		exact  = synced
	)
	if synced {
		fn(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: epoch}, Exact: true})
	}
	check := time.NewTicker(s.cfg.CheckInterval)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.closed:
			return errors.New("jetstream: the watch's consumer closed")
		case <-check.C:
			if s.epochChanged(ctx, epoch) {
				return errStartOver
			}
		case m := <-w.ch:
			meta, err := m.Metadata()
			if err != nil {
				continue // not a stream message
			}
			seq := meta.Sequence.Stream
			if seq <= last {
				s.log.Warn("sequence numbers went back: the bucket was recreated", slog.String("bucket", s.cfg.Bucket),
					slog.Uint64("revision", seq), slog.Uint64("last", last))
				return errStartOver
			}
			key := strings.TrimPrefix(m.Subject, s.prefix)
			op := kv.OpPut
			if isDeletion(m.Header) {
				op = kv.OpDelete
			}
			if key == s.cfg.EpochKey && (op == kv.OpDelete || string(m.Data) != epoch) {
				s.log.Info("the epoch key changed", slog.String("bucket", s.cfg.Bucket), slog.String("epoch", epoch))
				return errStartOver
			}
			if synced {
				// Exact stays so while every write is delivered in turn,
				// and becomes so again once the consumer has caught up.
				exact = (exact && seq == last+1) || meta.NumPending == 0
			}
			last = seq
			ev := kv.Event{Op: op, Key: key, Revision: kv.Revision{Epoch: epoch, Seq: seq}, Time: meta.Timestamp, Exact: synced && exact}
			if op == kv.OpPut {
				ev.Value = m.Data
			}
			fn(ev)
			if !synced && meta.NumPending == 0 {
				synced, exact = true, true
				fn(kv.Event{Op: kv.OpSynced, Revision: kv.Revision{Epoch: epoch, Seq: last}, Exact: true})
			}
		}
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
		s.log.Info("the epoch key changed", slog.String("bucket", s.cfg.Bucket), slog.String("epoch", epoch),
			slog.String("new_epoch", string(e.Value)))
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
