package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
)

// DefaultTTL is Config.TTL's default.
const DefaultTTL = 3 * time.Second

// ErrNotHeld is returned by WithFence when this holder does not hold a
// valid lease.
var ErrNotHeld = errors.New("lease: not held")

// Config configures a Lease.
type Config struct {
	// Key is the key that holds the lease: the id of its holder. Required.
	Key string
	// ID names this holder in the key; a random id if empty.
	ID string
	// TTL is how long the lease lasts without a renewal; DefaultTTL if 0.
	TTL time.Duration
	// Clock is this holder's clock: its validity, the others' silence and
	// Run's ticks are measured on it; clock.Real if nil.
	Clock  clock.Clock
	Logger *slog.Logger // nil: discard
}

// Lease is one holder's view and hold of a lease kept in a shared store.
// The caller feeds it the store's watch events (Observe) and drives it
// (Tick, or Run).
type Lease struct {
	store kv.Conditional
	cfg   Config
	log   *slog.Logger

	// writeMu serialises this holder's writes of the key and the writes
	// fenced on it (WithFence), so that they use the lease's last revision.
	// Taken before mu.
	writeMu sync.Mutex

	// mu guards the fields below; it is never held during I/O.
	mu      sync.Mutex
	epoch   string // the store's epoch, as the watch last said
	ready   bool   // the watch has delivered the store's content in epoch
	view    view   // the key as the watch saw it
	own     own    // this holder's hold
	lastRev uint64 // the key's revision when this holder last lost or released it
}

// view is the key as the watch saw it.
type view struct {
	holder string    // the id in the key; "" if none or deleted
	rev    uint64    // sequence number of the key's last write, a deletion included
	seen   time.Time // when the watch delivered it (or became ready), by this holder's clock
}

// own is this holder's hold of the lease.
type own struct {
	rev      uint64    // the key's revision after this holder's last write; 0: not held
	acquired uint64    // the revision at which it took the lease
	applied  bool      // Observe has reported the takeover applied
	epoch    string    // the epoch it took it in
	sent     time.Time // when it sent its last successful write of the key, by its clock
}

// New returns a Lease on store. It does no I/O.
func New(store kv.Conditional, cfg Config) (*Lease, error) {
	if cfg.Key == "" {
		return nil, errors.New("lease: a key is required")
	}
	if cfg.ID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.ID = hex.EncodeToString(b[:])
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Lease{store: store, cfg: cfg, log: cfg.Logger}, nil
}

// ID returns this holder's id.
func (l *Lease) ID() string { return l.cfg.ID }

// Interval is how often Tick should run: a third of the TTL.
func (l *Lease) Interval() time.Duration { return l.cfg.TTL / 3 }

// Observe takes one event of the store's watch, every one in order: the
// key's writes, OpReset and OpSynced. It reports free when the key was
// deleted (the holder stopped: Tick now to take over), and applied, once
// per takeover, when the watch has reached this holder's takeover.
func (l *Lease) Observe(ev kv.Event) (free, applied bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev.Op {
	case kv.OpReset:
		if ev.Revision.Epoch != l.epoch {
			l.epoch, l.ready, l.view = ev.Revision.Epoch, false, view{}
		}
		return false, false
	case kv.OpSynced:
		if l.ready {
			return false, false
		}
		// A holder's silence is measured from now: a key read at start-up
		// may be renewed any moment.
		l.ready, l.view.seen = true, l.cfg.Clock.Now()
		return true, false
	}
	// A watch that fell behind may skip the takeover itself, replaced by
	// a renewal: the first event at or past it says it was applied.
	applied = l.own.acquired != 0 && !l.own.applied && ev.Revision.Seq >= l.own.acquired
	if applied {
		l.own.applied = true
	}
	if ev.Key != l.cfg.Key {
		return false, applied
	}
	l.view = view{rev: ev.Revision.Seq, seen: l.cfg.Clock.Now()}
	if ev.Op == kv.OpPut {
		l.view.holder = string(ev.Value)
	}
	return l.view.holder == "", applied
}

// Held reports whether this holder holds a valid lease now, and the
// revision at which it took it.
func (l *Lease) Held() (acquired uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldLocked()
}

// heldLocked is Held: the lease is this holder's while less than its
// validity (2/3 of the TTL) has passed on its clock since it sent its last
// successful write of the key. A clock that reads before that moment went
// back: the time passed is unknown, and the lease is not deemed held until
// the next renewal succeeds.
func (l *Lease) heldLocked() (uint64, bool) {
	if l.own.rev == 0 || l.own.epoch != l.epoch {
		return 0, false
	}
	if passed := l.cfg.Clock.Since(l.own.sent); passed < 0 || passed >= l.validity() {
		return 0, false
	}
	return l.own.acquired, true
}

// validity is how long a holder deems the lease its own after it sent a
// successful write of the key: 2/3 of the TTL, the others' wait.
func (l *Lease) validity() time.Duration { return l.cfg.TTL * 2 / 3 }

// Tick renews the lease if this holder holds it, and takes it if it is free
// or its holder has not renewed it for a TTL. It returns the revision of a
// takeover it made, or 0.
func (l *Lease) Tick(ctx context.Context) (acquired uint64) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return l.tick(ctx)
}

// tick is Tick, with writeMu held by the caller.
func (l *Lease) tick(ctx context.Context) (acquired uint64) {
	l.mu.Lock()
	if !l.ready {
		l.mu.Unlock()
		return 0
	}
	if l.own.rev != 0 && l.own.epoch != l.epoch {
		l.loseLocked("the epoch changed")
	}
	start := l.cfg.Clock.Now()
	if start.Before(l.view.seen) {
		// The clock went back: the silence is measured again from now,
		// rather than for the jump and a TTL.
		l.view.seen = start
	}
	epoch, v, mine := l.epoch, l.view, l.own
	cond := kv.Condition{Key: l.cfg.Key, Revision: v.rev}
	switch {
	case mine.rev != 0:
		cond.Revision = mine.rev
	case v.holder == l.cfg.ID && v.rev > l.lastRev:
		// A takeover of ours went through though we did not hear back:
		// take it over again from there.
		cond.Revision = v.rev
	case v.holder != "" && start.Sub(v.seen) < l.cfg.TTL:
		l.mu.Unlock()
		return 0 // held, and renewed lately
	}
	l.mu.Unlock()

	rev, err := l.store.PutIf(ctx, l.cfg.Key, []byte(l.cfg.ID), cond)

	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil && l.epoch != epoch:
		// The store started over during the write: it is not ours.
	case err == nil && l.own.rev != 0:
		l.own.rev, l.own.sent = rev.Seq, start
	case err == nil:
		l.own = own{rev: rev.Seq, acquired: rev.Seq, epoch: epoch, sent: start}
		l.log.Info("lease taken", slog.String("key", l.cfg.Key), slog.String("id", l.cfg.ID),
			slog.Uint64("revision", rev.Seq), slog.String("previous", v.holder))
		return rev.Seq
	case errors.Is(err, kv.ErrRevisionMismatch):
		if l.own.rev != 0 {
			l.loseLocked("another holder took the lease")
		}
	case ctx.Err() == nil && l.own.rev != 0:
		l.log.Warn("lease renewal failed", slog.String("key", l.cfg.Key), slog.Any("err", err))
	}
	return 0
}

// loseLocked gives up this holder's lease.
func (l *Lease) loseLocked(why string) {
	l.log.Info("lease lost", slog.String("key", l.cfg.Key), slog.String("id", l.cfg.ID), slog.String("reason", why))
	l.lastRev = l.own.rev
	l.own = own{}
}

// WithFence calls write, serialised with this holder's renewals, with the
// lease's current revision (to fence the write on: a store refuses it once
// another holder took the lease) and the revision at which it was taken;
// ErrNotHeld without calling it if the lease is not held. An error from
// write that wraps kv.ErrRevisionMismatch means the fence failed: the lease
// is lost and WithFence returns ErrNotHeld.
//
// The write holds up this holder's renewals, so it never runs past the
// moment a renewal must start for the lease to stay valid: write's ctx
// ends half an Interval before the lease's validity does, and a renewal
// that is due (an Interval since the last) is made first, here. A slow
// write fails; the lease does not lapse for it.
func (l *Lease) WithFence(ctx context.Context, write func(ctx context.Context, fence, acquired uint64) error) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	_, held := l.heldLocked()
	due := held && l.cfg.Clock.Since(l.own.sent) >= l.Interval()
	l.mu.Unlock()
	if due {
		l.tick(ctx) // a renewal: this holder holds the lease, so never a takeover
	}
	l.mu.Lock()
	acquired, ok := l.heldLocked()
	fence := l.own.rev
	left := l.validity() - l.Interval()/2 - l.cfg.Clock.Since(l.own.sent)
	l.mu.Unlock()
	if !ok {
		return ErrNotHeld
	}
	if left <= 0 {
		return fmt.Errorf("lease: no time left before its renewal: %w", ErrNotHeld)
	}
	wctx, cancel := clock.WithTimeout(ctx, l.cfg.Clock, left)
	defer cancel()
	err := write(wctx, fence, acquired)
	if errors.Is(err, kv.ErrRevisionMismatch) {
		l.mu.Lock()
		if l.own.rev == fence {
			l.loseLocked("a write fenced on the lease was refused")
		}
		l.mu.Unlock()
		return ErrNotHeld
	}
	return err
}

// Release deletes the key if this holder holds the lease, so that another
// holder takes over without waiting for it to expire.
func (l *Lease) Release(ctx context.Context) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	rev := l.own.rev
	l.lastRev, l.own = rev, own{}
	l.mu.Unlock()
	if rev == 0 {
		return nil
	}
	if _, err := l.store.DeleteIf(ctx, l.cfg.Key, kv.Condition{Key: l.cfg.Key, Revision: rev}); err != nil {
		return fmt.Errorf("lease: release: %w", err)
	}
	return nil
}

// Run ticks every Interval of the holder's clock, and whenever kick
// receives, until ctx ends; then it releases the lease, within an Interval
// of real time (a shutdown's bound). onTakeover, if not nil, is called with
// the revision of each takeover.
func (l *Lease) Run(ctx context.Context, kick <-chan struct{}, onTakeover func(rev uint64)) {
	t := l.cfg.Clock.NewTicker(l.Interval())
	defer t.Stop()
	for {
		if rev := l.Tick(ctx); rev != 0 && onTakeover != nil {
			onTakeover(rev)
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.Interval())
			defer cancel()
			if err := l.Release(rctx); err != nil {
				l.log.Warn("lease release failed; it expires by itself", slog.Any("err", err))
			}
			return
		case <-t.C():
		case <-kick:
		}
	}
}
