package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/kv"
)

// writable returns an error when a write cannot succeed now: the connection
// is not up, or JetStream was found unavailable and no probe has found it
// back yet. It spares a caller the OpTimeout of a write that would fail.
func (s *Store) writable() error {
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("NATS connection %s", st)
	}
	if s.down.Load() {
		return errors.New("JetStream did not answer the last write; waiting for it to come back")
	}
	return nil
}

// markDown records that JetStream is unavailable and starts the probe that
// will find it back.
func (s *Store) markDown(cause error) {
	if s.down.Swap(true) {
		return
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probing || s.closed {
		return
	}
	s.probing = true
	s.log.Warn("JetStream unavailable; writes fail until it is back", slog.String("bucket", s.cfg.Bucket), slog.Any("err", cause))
	s.wg.Add(1)
	go s.probe()
}

// probe checks the bucket every ProbeInterval, recreating it if it is
// missing, until it takes a write again; then writes go through again. The
// probe is a write (a deletion of ProbeKey), because a stream leader that
// lost its quorum still answers requests for information until it steps
// down, but cannot store anything.
func (s *Store) probe() {
	defer s.wg.Done()
	start := s.cfg.Clock.Now()
	t := s.cfg.Clock.NewTicker(s.cfg.ProbeInterval)
	defer t.Stop()
	for failed := 0; ; {
		select {
		case <-s.stop:
			return
		case <-t.C():
		}
		if s.nc.Status() != nats.CONNECTED {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := s.ensureBucket(ctx, false)
		if err == nil {
			err = s.probeWrite(ctx)
		}
		if err != nil {
			if failed++; failed%(switchAfter*4) == 0 {
				s.tryAnotherServer(ctx, err)
			}
		}
		cancel()
		if err != nil {
			s.log.Debug("JetStream probe failed", slog.String("bucket", s.cfg.Bucket), slog.Any("err", err))
			continue
		}
		s.probeMu.Lock()
		s.probing = false
		s.down.Store(false)
		s.probeMu.Unlock()
		s.log.Info("JetStream available again", slog.String("bucket", s.cfg.Bucket), slog.Duration("after", s.cfg.Clock.Since(start)))
		return
	}
}

// probeWrite writes a deletion of ProbeKey, which stays the bucket's only
// message for that key.
func (s *Store) probeWrite(ctx context.Context) error {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	msg := &nats.Msg{Subject: s.subject(s.cfg.ProbeKey), Header: nats.Header{}}
	msg.Header.Set("KV-Operation", "DEL")
	ack, err := s.js.PublishMsg(ctx, msg)
	if err != nil {
		return s.wrap("probe", err)
	}
	s.stored(ack.Sequence)
	return nil
}

// wrap describes err, a failed request about what; it wraps kv.ErrUnavailable
// when JetStream could not be reached or could not answer.
func (s *Store) wrap(what string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("%w: %s: %w", kv.ErrUnavailable, what, err)
	}
	return fmt.Errorf("jetstream: %s: %w", what, err)
}

// errCodeNoPeers is the server's "no suitable peers for placement": a
// stream of R replicas cannot be placed while fewer than R servers are up,
// as while a cluster starts or loses servers. It comes with code 400, but
// goes away by itself.
const errCodeNoPeers natsjs.ErrorCode = 10005

// unavailable reports whether err means that JetStream could not take the
// request now, rather than that the request was wrong.
func unavailable(err error) bool {
	for _, target := range []error{
		context.DeadlineExceeded,
		nats.ErrTimeout,
		nats.ErrNoResponders,
		nats.ErrConnectionClosed,
		nats.ErrConnectionDraining,
		nats.ErrConnectionReconnecting,
		nats.ErrDisconnected,
		nats.ErrReconnectBufExceeded, // publishing while reconnecting, without a buffer
		natsjs.ErrNoStreamResponse,
		natsjs.ErrStreamNotFound,
		natsjs.ErrBucketNotFound,
		natsjs.ErrJetStreamNotEnabled,
		natsjs.ErrJetStreamNotEnabledForAccount,
		nats.ErrStreamNotFound, // the older API's (leaderSeqOf, the watch's consumer)
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	// Each API has its own error type: the newer (natsjs) and the older
	// one (nats), which answers a cluster that elects with "JetStream
	// system temporarily unavailable" (503) as the newer one does.
	if apiErr := (*natsjs.APIError)(nil); errors.As(err, &apiErr) {
		return apiErr.Code >= 500 || apiErr.ErrorCode == errCodeNoPeers
	}
	if apiErr := (*nats.APIError)(nil); errors.As(err, &apiErr) {
		return apiErr.Code >= 500 || apiErr.ErrorCode == nats.ErrorCode(errCodeNoPeers)
	}
	return false
}

// isWrongLastSequence reports whether err is JetStream's refusal of a
// conditional write: 10071, or 10164 on replicated streams.
func isWrongLastSequence(err error) bool {
	var apiErr *natsjs.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequenceConstant
}

// Available reports whether writes can go through now, as far as the store
// knows: the connection is up and no write has found JetStream unavailable
// since the last successful probe.
func (s *Store) Available() bool {
	return s.writable() == nil
}

// mismatch is wrapped, the refusal of a conditional write, with the key's
// last write that the stream's answer, refused, names ("wrong last
// sequence: 15"), if it names one.
func mismatch(wrapped, refused error) error {
	var apiErr *natsjs.APIError
	if !errors.As(refused, &apiErr) {
		return wrapped
	}
	_, n, ok := strings.Cut(apiErr.Description, "wrong last sequence: ")
	if !ok {
		return wrapped
	}
	last, err := strconv.ParseUint(strings.TrimSpace(n), 10, 64)
	if err != nil {
		return wrapped
	}
	return &kv.MismatchError{Last: last, Err: wrapped}
}
