package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
)

// A store that forgets: JetStream acknowledges a write before it reaches
// the disk (a server's sync_interval), so a power loss of the servers can
// lose the stream's tail, and an operator can restore a server's store
// from an older copy. The epoch key comes back as it was, so the store
// names the same epoch while it holds another history: revisions numbered
// on it would repeat with other states. A watch checks, at the start of
// every pass (a reconnection, a restart of its consumer) and at every read
// of the epoch key (CheckInterval), that the stream still holds the last
// write it delivered in the epoch. When it does not, the store starts a
// new epoch that keeps the stream's content (the epoch key's value ends
// with keptSuffix, and OpReset says the epoch begins at 0), and every
// worker, which follows the epoch key, starts over from what the store
// holds.

// keptSuffix ends the value of an epoch key written for a store that
// forgot: such an epoch keeps the writes stored before its key.
const keptSuffix = "-kept"

// watching is what one Watch remembers from pass to pass, for a store
// that forgets; its goroutine's alone.
type watching struct {
	mark      watermark // the last write delivered in its epoch
	passEpoch string    // the epoch of the last pass
	left      []string  // the epochs it left, latest last (at most maxLeftEpochs)
}

// watermark is the last write a watch delivered in an epoch: what a store
// that forgot no longer holds.
type watermark struct {
	epoch   string
	seq     uint64
	subject string
	time    time.Time
	data    []byte
}

// forgotten returns why the stream no longer holds mark, the last write the
// watch delivered in epoch, or "" if it does (or cannot tell now): it holds
// another write at mark's sequence number, or none while mark's key has no
// later write (a key's earlier writes are dropped as it is written again),
// or ends before it. One request, two when mark's key was written since.
func (s *Store) forgotten(ctx context.Context, mark watermark, epoch string) string {
	if mark.seq == 0 || mark.epoch != epoch {
		return ""
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	m, err := s.legacy.GetMsg(s.stream, mark.seq, nats.Context(ctx))
	switch {
	case err == nil && (m.Subject != mark.subject || !m.Time.Truncate(time.Millisecond).Equal(mark.time.Truncate(time.Millisecond)) ||
		!bytes.Equal(m.Data, mark.data)):
		return fmt.Sprintf("the stream holds another write at revision %d than the one this worker applied", mark.seq)
	case err == nil:
		return ""
	case !errors.Is(err, nats.ErrMsgNotFound):
		return ""
	}
	last, err := s.legacy.GetLastMsg(s.stream, mark.subject, nats.Context(ctx))
	switch {
	case errors.Is(err, nats.ErrMsgNotFound):
		return fmt.Sprintf("the stream no longer holds %s, written at revision %d", strings.TrimPrefix(mark.subject, s.prefix), mark.seq)
	case err == nil && last.Sequence < mark.seq:
		return fmt.Sprintf("the last write of %s is revision %d, before revision %d that this worker applied",
			strings.TrimPrefix(mark.subject, s.prefix), last.Sequence, mark.seq)
	}
	return ""
}

// confirmForgotten returns why the stream no longer holds mark, if it says
// so twice, CheckInterval apart: a stream leader's figures may lag what a
// replica already delivered to a watch for a moment, never for that long.
func (s *Store) confirmForgotten(ctx context.Context, mark watermark, epoch string) string {
	if s.forgotten(ctx, mark, epoch) == "" {
		return ""
	}
	if clock.Sleep(ctx, s.cfg.Clock, s.cfg.CheckInterval) != nil {
		return ""
	}
	return s.forgotten(ctx, mark, epoch)
}

// startOverForgotten returns errStartOver, once a new epoch is started,
// if the stream no longer holds the last write the watch delivered in
// epoch (confirmed, CheckInterval apart); nil if it does.
func (s *Store) startOverForgotten(ctx context.Context, w *watching, epoch string) error {
	why := s.confirmForgotten(ctx, w.mark, epoch)
	if why == "" {
		return nil
	}
	return s.startOver(ctx, epoch, why)
}

// startOver returns errStartOver once a new epoch that keeps the stream's
// content replaces epoch, which the stream no longer holds (why), unless
// the epoch key names another epoch already.
func (s *Store) startOver(ctx context.Context, epoch, why string) error {
	ep, err := s.currentEpoch(ctx)
	if err != nil {
		return err
	}
	if ep.name == epoch {
		if err := s.startKeptEpoch(ctx, epoch, ep.seq, why); err != nil {
			return err
		}
	}
	return errStartOver
}

// maxLeftEpochs bounds the epochs a watch remembers having left.
const maxLeftEpochs = 16

// startOverReturned notes the epoch of a new pass, ep, and returns
// errStartOver, once a new kept epoch is started, if ep is an epoch the
// watch left before: epochs only ever move on, so an epoch key that names
// one again is a store that forgot the writes since (a store rolled back
// to a copy taken before the last epoch change). The epoch key is read
// again from the stream's leader first: a server that is behind may still
// answer the old key for a moment.
func (s *Store) startOverReturned(ctx context.Context, w *watching, ep epochAt) error {
	if !slices.Contains(w.left, ep.name) {
		if w.passEpoch != "" && w.passEpoch != ep.name {
			w.left = append(w.left, w.passEpoch)
			if n := len(w.left) - maxLeftEpochs; n > 0 {
				w.left = w.left[n:]
			}
		}
		w.passEpoch = ep.name
		return nil
	}
	m, err := s.epochKeyFromLeader(ctx, ep)
	if m == nil {
		return err
	}
	why := fmt.Sprintf("the epoch key names epoch %s again, which this worker had left: the store forgot what followed it", ep.name)
	if err := s.startKeptEpoch(ctx, ep.name, m.Sequence, why); err != nil {
		return err
	}
	return errStartOver
}

// startOverWentBack returns errStartOver, once a new kept epoch is
// started, if the epoch key, ep, names another epoch than the watch's last
// write (its mark) and was written before it: epochs only ever move on, and
// a new one's key is written after every write of the one it replaces, so
// a key older than a write the watch applied in another epoch is a store
// that went back to a copy taken before that write (a copy of an epoch the
// watch never saw, or saw before it was restarted), provided the stream no
// longer holds the mark: a write the watch took for its old epoch's past a
// purge is still there. A key written after the mark, by time, on a stream
// that numbers from below it is the epoch that a worker started once the
// store went back (or a bucket made again): the watch follows it, and
// forgets a mark of a history the store no longer holds.
func (s *Store) startOverWentBack(ctx context.Context, w *watching, ep epochAt) error {
	mark := w.mark
	if mark.seq == 0 || mark.epoch == ep.name || ep.seq >= mark.seq {
		return nil
	}
	m, err := s.epochKeyFromLeader(ctx, ep)
	if m == nil {
		return err
	}
	if !m.Time.Before(mark.time) {
		w.mark = watermark{}
		return nil
	}
	gone := s.forgotten(ctx, mark, mark.epoch)
	if gone == "" {
		// The stream still holds the mark: a write stored after the key
		// (a purge's new epoch) that the watch took for its old epoch's.
		w.mark = watermark{}
		return nil
	}
	why := fmt.Sprintf("the epoch key names epoch %s, written at revision %d, before revision %d that this worker applied in epoch %s, which %s: the store went back to an older copy",
		ep.name, m.Sequence, mark.seq, mark.epoch, gone)
	if err := s.startKeptEpoch(ctx, ep.name, m.Sequence, why); err != nil {
		return err
	}
	return errStartOver
}

// epochKeyFromLeader reads the epoch key's last write again from the
// stream's leader and returns it if it still names ep; if not (the server
// the watch read was behind, or the key moved on meanwhile) it waits
// CheckInterval and returns nil with errStartOver, for the watch to read it
// again, or with ctx's error.
func (s *Store) epochKeyFromLeader(ctx context.Context, ep epochAt) (*nats.RawStreamMsg, error) {
	lctx, cancel := s.opContext(ctx)
	m, err := s.legacy.GetLastMsg(s.stream, s.subject(s.cfg.EpochKey), nats.Context(lctx))
	cancel()
	if err == nil && string(m.Data) == ep.name {
		return m, nil
	}
	if err := clock.Sleep(ctx, s.cfg.Clock, s.cfg.CheckInterval); err != nil {
		return nil, err
	}
	return nil, errStartOver
}

// startKeptEpoch replaces epoch, whose key's write is epochSeq, with a new
// epoch that keeps the stream's content, unless another worker has
// replaced it first (the write is conditional on the key's last write).
func (s *Store) startKeptEpoch(ctx context.Context, epoch string, epochSeq uint64, why string) error {
	s.forgets.Add(1)
	next := kv.NewEpoch() + keptSuffix
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	_, err := s.handles().bucket.Update(ctx, s.cfg.EpochKey, []byte(next), epochSeq)
	switch {
	case err == nil:
		s.log.Error("the store forgot writes it had acknowledged: a new epoch keeps what it holds; the reports it forgot come back with each node's next heartbeat",
			slog.String("bucket", s.cfg.Bucket), slog.String("reason", why), slog.String("epoch", epoch), slog.String("new_epoch", next))
	case errors.Is(err, natsjs.ErrKeyExists):
		s.log.Error("the store forgot writes it had acknowledged: another worker started a new epoch already",
			slog.String("bucket", s.cfg.Bucket), slog.String("reason", why), slog.String("epoch", epoch))
	default:
		return s.wrap("start a new epoch after the store forgot writes ("+why+")", err)
	}
	return nil
}

// Forgets counts the times this store found that the stream no longer held
// a write it had acknowledged or its watch had delivered, since it was
// opened.
func (s *Store) Forgets() uint64 { return s.forgets.Load() }

// epochStart is where an epoch whose key holds value and was written at
// seq begins: at its key, or at 0 for an epoch that keeps what the stream
// held before it.
func epochStart(value string, seq uint64) uint64 {
	if strings.HasSuffix(value, keptSuffix) {
		return 0
	}
	return seq
}
