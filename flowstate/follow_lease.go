package flowstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"flowstate/kv"
)

// The publisher lease. PublisherKey holds the id of the worker that
// publishes. It renews the key every LeaseTTL/3 with a compare-and-set on
// its last revision, and deems itself the publisher for 2/3 of LeaseTTL
// after it sent its last successful renewal. The others take the lease over,
// with a compare-and-set on the revision they last saw, when they have seen
// no write of the key for LeaseTTL by their own clock, or at once when it is
// deleted (the publisher stopped). So clocks are never compared across
// machines, a publisher stops before anyone may take over, and exactly one
// takeover wins. A new publisher serves only once its watch has applied its
// own lease write, so its state includes everything its predecessor could
// have written or published. The aggregate key is written fenced on the
// lease's revision: the store refuses it from a worker that lost the lease.

// leaseView is the lease as the watch saw it.
type leaseView struct {
	holder string    // the id in the key; "" if none or deleted
	rev    uint64    // sequence number of the key's last write, a deletion included
	seen   time.Time // when the watch applied it (or became ready)
}

// ownLease is this worker's hold of the lease.
type ownLease struct {
	rev        uint64    // the lease's revision after this worker's last write; 0: not held
	acquired   uint64    // the revision at which this worker took it
	epoch      string    // the epoch it was taken in
	validUntil time.Time // this worker publishes until then
}

// applyLeaseLocked applies a write of PublisherKey.
func (f *follower) applyLeaseLocked(ev kv.Event) {
	f.lease = leaseView{rev: ev.Revision.Seq, seen: time.Now()}
	if ev.Op == kv.OpPut {
		f.lease.holder = string(ev.Value)
	}
	switch {
	case f.lease.holder == "":
		f.kick() // the publisher stopped: take over now
	case ev.Revision.Seq == f.acquired.Load():
		f.signal() // this worker's takeover is applied: publish
	}
}

// Publisher reports whether this following Manager is the publisher now.
func (m *Manager) Publisher() bool {
	f := m.follow.Load()
	if f == nil {
		return false
	}
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	return f.publisherLocked()
}

// publisherLocked reports whether this worker holds a valid lease whose
// write its watch has applied. leaseMu is held.
func (f *follower) publisherLocked() bool {
	if f.own.rev == 0 || !time.Now().Before(f.own.validUntil) {
		return false
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.ready && !f.stopped && f.m.epoch == f.own.epoch && f.watermark >= f.own.acquired
}

// leaseLoop keeps or takes the lease until ctx ends.
func (f *follower) leaseLoop(ctx context.Context) {
	defer close(f.leaseDone)
	t := time.NewTicker(f.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		f.tickLease(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.kickLease:
		}
	}
}

// tickLease renews the lease if this worker holds it, and takes it if it
// is free or has not been renewed for LeaseTTL.
func (f *follower) tickLease(ctx context.Context) {
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	m := f.m
	m.mu.Lock()
	ready, epoch, view := f.ready, m.epoch, f.lease
	m.mu.Unlock()
	if !ready {
		return
	}
	validFor := f.opts.LeaseTTL * 2 / 3
	if f.own.rev != 0 && f.own.epoch != epoch {
		f.loseLocked("the epoch changed")
	}
	start := time.Now()
	cond := kv.Condition{Key: PublisherKey, Revision: view.rev}
	switch {
	case f.own.rev != 0:
		cond.Revision = f.own.rev
	case view.holder == f.opts.ID && view.rev > f.lastRev:
		// A takeover of ours went through though we did not hear back:
		// take it over again from there.
		cond.Revision = view.rev
	case view.holder != "" && start.Sub(view.seen) < f.opts.LeaseTTL:
		return // held, and renewed lately
	}
	rev, err := f.store.PutIf(ctx, PublisherKey, []byte(f.opts.ID), cond)
	switch {
	case err == nil && f.own.rev != 0:
		f.own.rev, f.own.validUntil = rev.Seq, start.Add(validFor)
	case err == nil:
		f.own = ownLease{rev: rev.Seq, acquired: rev.Seq, epoch: epoch, validUntil: start.Add(validFor)}
		f.acquired.Store(rev.Seq)
		f.log.Info("this worker is the publisher", slog.String("id", f.opts.ID), slog.Uint64("revision", rev.Seq),
			slog.String("previous", view.holder))
		m.mu.Lock()
		f.wroteRev = 0 // write the aggregate key at once
		if f.watermark >= rev.Seq {
			f.signal()
		}
		m.mu.Unlock()
	case errors.Is(err, kv.ErrRevisionMismatch):
		if f.own.rev != 0 {
			f.loseLocked("another worker took the lease")
		}
	case ctx.Err() == nil && f.own.rev != 0:
		f.log.Warn("publisher lease renewal failed", slog.Any("err", err))
	}
}

// loseLocked gives up this worker's lease. leaseMu is held.
func (f *follower) loseLocked(why string) {
	f.log.Info("this worker is no longer the publisher", slog.String("id", f.opts.ID), slog.String("reason", why))
	f.lastRev = f.own.rev
	f.own = ownLease{}
	f.acquired.Store(0)
}

// release deletes the lease if this worker holds it, so that another one
// takes over without waiting for it to expire.
func (f *follower) release(ctx context.Context) {
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	if f.own.rev == 0 {
		return
	}
	if _, err := f.store.DeleteIf(ctx, PublisherKey, kv.Condition{Key: PublisherKey, Revision: f.own.rev}); err != nil {
		f.log.Warn("publisher lease release failed; it expires by itself", slog.Any("err", err))
	}
	f.lastRev = f.own.rev
	f.own = ownLease{}
	f.acquired.Store(0)
}

// flush writes the aggregate key if this worker is the publisher and the
// aggregate changed since it last wrote it.
func (f *follower) flush(ctx context.Context) error {
	f.leaseMu.Lock()
	defer f.leaseMu.Unlock()
	if !f.publisherLocked() {
		return ErrNotPublisher
	}
	m := f.m
	m.mu.Lock()
	rev, epoch := m.rev, m.epoch
	if rev == 0 || (f.wroteRev != 0 && f.changeRev <= f.wroteRev) {
		m.mu.Unlock()
		return nil
	}
	f.aggFlows = m.appendAggregateLocked(f.aggFlows[:0])
	m.mu.Unlock()
	f.aggJSON = AppendJSON(f.aggJSON[:0], f.aggFlows)
	_, err := f.store.PutIf(ctx, StateKey, f.aggJSON, kv.Condition{Key: PublisherKey, Revision: f.own.rev})
	if errors.Is(err, kv.ErrRevisionMismatch) {
		f.loseLocked("the aggregate write was refused")
		return ErrNotPublisher
	}
	if err != nil {
		return fmt.Errorf("flowstate: store aggregate: %w", err)
	}
	m.mu.Lock()
	if m.epoch == epoch {
		f.wroteRev = rev
	}
	m.mu.Unlock()
	return nil
}

// randomID returns 8 random hex digits.
func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
