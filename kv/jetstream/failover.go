package jetstream

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/flowstate-io/flowstate/internal/clock"
)

// A server whose JetStream failed (its store hit a full disk, or its meta
// layer fell behind and stopped) can stay up and answer every JetStream
// request "temporarily unavailable", or keep a watch's consumer alive that
// delivers nothing, while the other servers of the cluster serve. The
// store moves its connection to another server of the connection's pool
// when JetStream keeps failing through one (tryAnotherServer):
//
//   - Open, after switchAfter attempts in a row found it unavailable;
//   - the probe of an unavailable store, after switchAfter x 4 probes;
//   - Watch, after switchAfter passes in a row ended in an error, or
//     switchAfter attempts in a row to replace a stuck consumer failed (a
//     watch is stuck when it delivered nothing for stuckAfter while a
//     write the store saw stored was still ahead of it).
//
// The writes the store sees stored (stored) are its own acknowledged
// writes, the probe's and the barrier's, and the key's last write that a
// refused conditional write names: after a partition, a worker whose
// writes all come back refused (another worker wrote the keys meanwhile)
// learns from the refusals how far the stream has gone, which its watch's
// consumer, on a server whose stream is behind, does not show.
//
// A pool of one server stays where it is.
const switchAfter = 3

// stuckAfter is how long a watch may deliver nothing while a stored write
// is ahead of it before it replaces its consumer: three heartbeats.
func (s *Store) stuckAfter() time.Duration { return 3 * s.cfg.Heartbeat }

// tryAnotherServer moves the store's connection to another server of its
// pool, if it has another, and waits until it is connected again, for at
// most OpTimeout. why is what kept failing, for the log.
func (s *Store) tryAnotherServer(ctx context.Context, why error) {
	if len(s.nc.Servers()) < 2 || !s.nc.IsConnected() {
		return
	}
	from := s.serverName()
	if err := s.nc.ForceReconnect(); err != nil {
		return
	}
	s.log.Warn("JetStream keeps failing through this NATS server: moving to another server of the connection; if it lasts, the server may need a restart",
		slog.String("bucket", s.cfg.Bucket), slog.String("server", from), slog.Any("err", why))
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	for !s.nc.IsConnected() {
		if clock.Sleep(ctx, s.cfg.Clock, 10*time.Millisecond) != nil {
			return
		}
	}
}

// stored records seq as a write the store has seen stored: acknowledged,
// or named by the stream leader as a key's last write.
func (s *Store) stored(seq uint64) { atomicMax(&s.storedSeq, seq) }

func atomicMax(v *atomic.Uint64, seq uint64) {
	for {
		cur := v.Load()
		if seq <= cur || v.CompareAndSwap(cur, seq) {
			return
		}
	}
}
