package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/protocol"
)

// Epoch implements Store: it reads the epoch key, and creates it with a new
// epoch if it is missing.
func (s *Store) Epoch(ctx context.Context) (string, error) {
	e, err := s.currentEpoch(ctx)
	return e.name, err
}

// currentEpoch is Epoch, with the sequence number of the epoch key's write.
func (s *Store) currentEpoch(ctx context.Context) (epochAt, error) {
	for range 5 {
		e, err := s.Get(ctx, s.cfg.EpochKey)
		if err == nil && protocol.ValidEpoch(e.Value) {
			s.setEpoch(string(e.Value), e.Revision)
			return epochAt{name: string(e.Value), seq: e.Revision}, nil
		}
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return epochAt{}, err
		}
		epoch := kv.NewEpoch()
		cctx, cancel := s.opContext(ctx)
		var seq uint64
		if err == nil {
			// An epoch that is not 1 to 64 printable ASCII characters is
			// no epoch (written from outside): it is replaced, on the
			// condition that it is still the key's last write, and never
			// served or logged.
			s.log.Warn("the epoch key holds no valid epoch: a new epoch replaces it", slog.String("bucket", s.cfg.Bucket),
				slog.Int("bytes", len(e.Value)), slog.String("new_epoch", epoch))
			seq, err = s.handles().bucket.Update(cctx, s.cfg.EpochKey, []byte(epoch), e.Revision)
		} else {
			seq, err = s.handles().bucket.Create(cctx, s.cfg.EpochKey, []byte(epoch))
		}
		cancel()
		if err == nil {
			s.setEpoch(epoch, seq)
			s.log.Info("new epoch", slog.String("bucket", s.cfg.Bucket), slog.String("epoch", epoch))
			return epochAt{name: epoch, seq: seq}, nil
		}
		if !errors.Is(err, natsjs.ErrKeyExists) {
			return epochAt{}, s.wrap("create epoch", err)
		}
		// Another process created or replaced it first: read theirs.
	}
	return epochAt{}, fmt.Errorf("%w: the epoch key keeps changing", kv.ErrUnavailable)
}

// LastRevision implements Watcher: a sequence number at or past every
// write the stream had committed when it was called, whichever replica a
// watch reads from. It writes a deletion of ProbeKey through the stream's
// leader and returns that write's sequence number (or the stream's last, if
// higher): the leader numbers a write after everything it has committed,
// while the stream's last sequence number as the leader reports it lags
// what a follower may already have applied and delivered to a watch.
// Callers waiting at once share one write: a call joins the next one to
// start (rounds). The write is one the store remembers (knownProbe): a
// barrier numbered at or below the highest write recorded (numbered), or
// where another write was recorded, is ErrUnavailable.
func (s *Store) LastRevision(ctx context.Context) (kv.Revision, error) {
	rev, err := s.barrier.do(ctx, s.lastRevision)
	if err != nil && ctx.Err() != nil && !errors.Is(err, kv.ErrUnavailable) {
		return kv.Revision{}, s.wrap("last revision", err) // ctx ended while waiting
	}
	return rev, err
}

func (s *Store) lastRevision(ctx context.Context) (kv.Revision, error) {
	if err := s.writable(); err != nil {
		return kv.Revision{}, fmt.Errorf("%w: last revision: %v", kv.ErrUnavailable, err)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	epoch := s.lastEpoch()
	top := s.known.topOf(epoch)
	ack, err := s.deleteProbeKey(ctx)
	if err != nil {
		return kv.Revision{}, s.wrap("last revision", err)
	}
	s.stored(ack.Sequence)
	if err := s.known.numbered(epoch, top, ack.Sequence, "a read barrier", ""); err != nil {
		return kv.Revision{}, fmt.Errorf("last revision: %w", err)
	}
	if s.knownProbe(ack.Sequence) {
		// The watch may have applied the write the stream held there
		// before; until it has started over, no state is as of ack.
		return kv.Revision{}, fmt.Errorf("%w: last revision: the stream numbers the barrier %d where it acknowledged or delivered another write to this worker: it forgot that one",
			kv.ErrUnavailable, ack.Sequence)
	}
	info, err := s.handles().stream.Info(ctx)
	if err != nil {
		return kv.Revision{}, s.wrap("last revision", err)
	}
	// The epoch key is written once per epoch and kept (History 1, no
	// TTL), so the stream's first message is at or before it until the
	// bucket is wiped: a barrier then must not pass on the old epoch's
	// state, which the workers' watches may have read in part (a purge
	// drops writes that some watches had delivered and others had not).
	if e := s.epoch.Load(); e != nil && e.seq > 0 && (info.State.Msgs == 0 || info.State.FirstSeq > e.seq) {
		return kv.Revision{}, fmt.Errorf("%w: last revision: the key of epoch %s is gone: the bucket was wiped", kv.ErrUnavailable, e.name)
	}
	return kv.Revision{Epoch: s.lastEpoch(), Seq: max(ack.Sequence, info.State.LastSeq)}, nil
}

// knownProbe records that the stream took a deletion of ProbeKey at seq
// (knownWrites), and reports whether it had acknowledged or delivered
// another write there to this store in the epoch. A watch that then
// delivers another write at seq starts a new epoch: it reads a stream that
// forgot the barrier, or a replica that holds another history than the
// leader's, and a get waiting for the watch to pass the barrier is not
// answered from that history.
func (s *Store) knownProbe(seq uint64) (other bool) {
	return s.known.note(s.lastEpoch(), seq, s.known.hash(s.subject(s.cfg.ProbeKey), nil))
}

// epochAt is an epoch and the sequence number of the epoch key's write
// that started it.
type epochAt struct {
	name string
	seq  uint64
}

func (s *Store) setEpoch(e string, seq uint64) {
	if old := s.epoch.Load(); old == nil || old.name != e || old.seq != seq {
		s.epoch.Store(&epochAt{name: e, seq: seq})
	}
}

func (s *Store) lastEpoch() string {
	if e := s.epoch.Load(); e != nil {
		return e.name
	}
	return ""
}

// deleteProbeKey writes a deletion of ProbeKey, under opts: the store's
// writes that change no key a reader looks at (the read barrier, the
// fencing probes).
func (s *Store) deleteProbeKey(ctx context.Context, opts ...natsjs.PublishOpt) (*natsjs.PubAck, error) {
	msg := &nats.Msg{Subject: s.subject(s.cfg.ProbeKey), Header: nats.Header{}}
	msg.Header.Set("KV-Operation", "DEL")
	return s.js.PublishMsg(ctx, msg, opts...)
}
