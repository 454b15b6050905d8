package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/lease"
)

// What the publisher does: it writes the aggregate key and evicts silent
// nodes, for every worker. One worker at a time holds the lease.

// publishing is the publisher's scratch for the aggregate key's writes,
// guarded by Replica.pubMu, and what its gauges read.
type publishing struct {
	flows        []flowstate.Flow
	json         []byte
	fenceRefused bool // the store refused a fenced write while the lease was held; logged once

	// dropped: the aggregate's JSON did not fit one value of the store, and
	// the key was deleted rather than left stale. Read by AggregateKey.
	dropped   atomic.Bool
	jsonBytes atomic.Int64 // the size of the aggregate's JSON at the last write
}

// AggregateKey reports, on the publisher, whether the aggregate key holds
// the aggregate (current false: it was deleted because the aggregate's
// JSON did not fit one value of the store), and the size of that JSON at
// the last write; publisher is false on the other workers, which write
// nothing.
func (r *Replica) AggregateKey() (current bool, jsonBytes int64, publisher bool) {
	return !r.pub.dropped.Load(), r.pub.jsonBytes.Load(), r.Publisher()
}

// Publisher reports whether this worker is the publisher now: it holds a
// valid lease, and its watch has applied its takeover, so that its state
// includes everything its predecessor could have published.
func (r *Replica) Publisher() bool {
	acquired, ok := r.lease.Held()
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.publisherLocked(acquired)
}

func (r *Replica) publisherLocked(acquired uint64) bool {
	return r.checkLocked() == nil && r.watch.delivered >= acquired
}

// Flush writes the aggregate key, fenced on the publisher lease, if this
// worker is the publisher and the aggregate changed since it last wrote it;
// ErrNotPublisher if it is not the publisher.
func (r *Replica) Flush(ctx context.Context) error {
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	p := &r.pub
	err := r.lease.WithFence(ctx, func(ctx context.Context, fence, acquired uint64) error {
		r.mu.Lock()
		if !r.publisherLocked(acquired) {
			r.mu.Unlock()
			return ErrNotPublisher
		}
		rev, epoch := r.served.revision, r.watch.epoch
		if rev == 0 || (r.served.written != 0 && r.served.changeAt <= r.served.written) {
			r.mu.Unlock()
			return nil
		}
		p.flows = r.appendServedLocked(p.flows[:0])
		r.mu.Unlock()
		p.json = flowstate.AppendJSON(p.json[:0], p.flows)
		p.jsonBytes.Store(int64(len(p.json)))
		cond := kv.Condition{Key: PublisherKey, Revision: fence}
		_, err := r.store.PutIf(ctx, flowstate.StateKey, p.json, cond)
		if errors.Is(err, kv.ErrTooLarge) {
			err = r.dropAggregateKey(ctx, cond, err)
		} else if err == nil && p.dropped.Swap(false) {
			r.log.Info("the aggregate fits one value of the store again: its key is written again",
				slog.String("key", flowstate.StateKey), slog.Int("json_bytes", len(p.json)))
		}
		if errors.Is(err, kv.ErrRevisionMismatch) && r.stillHeld(ctx, fence) {
			// Refused, though the lease is still this worker's: the store
			// does not honour the fence (a server too old for it). Not a
			// lost lease: the state is still published; logged once.
			if !p.fenceRefused {
				p.fenceRefused = true
				r.log.Error("the store refused the aggregate write fenced on the publisher lease, which this worker still holds; the state is published, the aggregate key is not written",
					slog.String("key", flowstate.StateKey), slog.Any("err", err))
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("state: store aggregate: %w", err)
		}
		p.fenceRefused = false
		r.mu.Lock()
		if r.watch.epoch == epoch {
			r.served.written = rev
		}
		r.mu.Unlock()
		return nil
	})
	if errors.Is(err, lease.ErrNotHeld) {
		return ErrNotPublisher
	}
	return err
}

// dropAggregateKey deletes the aggregate key, fenced as its writes are,
// when the aggregate's JSON does not fit one value of the store (tooLarge
// says why): the key holds the aggregate or nothing, never an older value.
// It is deleted once, and written again as soon as the aggregate fits.
func (r *Replica) dropAggregateKey(ctx context.Context, cond kv.Condition, tooLarge error) error {
	p := &r.pub
	if p.dropped.Load() {
		return nil
	}
	if _, err := r.store.DeleteIf(ctx, flowstate.StateKey, cond); err != nil {
		return fmt.Errorf("state: delete the aggregate key, whose value does not fit: %w", err)
	}
	p.dropped.Store(true)
	r.log.Warn("the aggregate's JSON does not fit one value of the store: its key is deleted until it fits; raise the NATS server's max_payload to keep it written",
		slog.String("key", flowstate.StateKey), slog.Int("json_bytes", len(p.json)), slog.Any("err", tooLarge))
	return nil
}

// stillHeld reports whether the lease key's last write is still fence,
// this worker's.
func (r *Replica) stillHeld(ctx context.Context, fence uint64) bool {
	e, err := r.store.Get(ctx, PublisherKey)
	return err == nil && e.Revision == fence
}

// evictInFlight bounds the deletions EvictSilent has in flight at once:
// thousands of silent nodes cost a few round trips to the store, not one
// each in series, without a burst the store must queue.
const evictInFlight = 64

// EvictSilent deletes the key of every node whose last report this
// worker applied before cutoff, by its own clock (ReplicaOptions.Clock),
// as Manager.EvictSilent removes it, and waits until the
// watch has applied the deletions. Only the publisher evicts, for every
// worker: on the others it does nothing. Each deletion is conditional on
// the node's last write, so a report that came in meanwhile stays; up to
// evictInFlight are in flight at once.
func (r *Replica) EvictSilent(ctx context.Context, cutoff time.Time) ([]uint64, MergeResult, error) {
	publisher := r.Publisher()
	type silent struct {
		id, rev uint64
		del     kv.Revision // the deletion's, once done
		err     error
	}
	var nodes []silent
	r.mu.Lock()
	err := r.checkLocked()
	v := r.versionLocked()
	if err == nil && publisher {
		for id, n := range r.watch.nodes {
			if n.heard.Before(cutoff) {
				nodes = append(nodes, silent{id: id, rev: n.revision})
			}
		}
	}
	r.mu.Unlock()
	res := MergeResult{Version: v}
	if err != nil {
		return nil, res, err
	}
	slots := make(chan struct{}, evictInFlight)
	var wg sync.WaitGroup
	for i := range nodes {
		n := &nodes[i]
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			key := flowstate.NodeKey(n.id)
			n.del, n.err = r.store.DeleteIf(ctx, key, kv.Condition{Key: key, Revision: n.rev})
		})
	}
	wg.Wait()
	var evicted []uint64
	var last uint64
	var failed error
	for _, n := range nodes {
		switch {
		case errors.Is(n.err, kv.ErrRevisionMismatch):
			// it reported again
		case n.err != nil:
			if failed == nil {
				failed = fmt.Errorf("state: evict node %d: %w", n.id, n.err)
			}
		default:
			evicted = append(evicted, n.id)
			last = max(last, n.del.Seq)
		}
	}
	if failed != nil || last == 0 {
		return evicted, res, failed
	}
	done, err := r.awaitApplied(ctx, v.Epoch, last, v.Revision)
	if err != nil {
		return evicted, res, fmt.Errorf("state: evictions not seen by the watch: %w", err)
	}
	return evicted, done, nil
}

// awaitApplied waits until the served state includes the write seq of
// epoch, and returns the result of the writes since revision rev. If the
// watch does not get there within ApplyTimeout, reports fail at once until
// it does, rather than queue behind this wait.
func (r *Replica) awaitApplied(ctx context.Context, epoch string, seq, rev uint64) (MergeResult, error) {
	wctx, cancel := clock.WithTimeout(ctx, r.opts.Clock, r.opts.ApplyTimeout)
	defer cancel()
	var res MergeResult
	err := r.await(wctx, func() bool {
		if r.watch.epoch != epoch {
			return true
		}
		if !r.servesLocked(seq) {
			return false
		}
		res = MergeResult{Version: flowstate.Version{Epoch: epoch, Revision: seq}, Changed: r.served.changeAt > rev}
		return true
	})
	switch {
	case err != nil:
		r.mu.Lock()
		if r.watch.epoch == epoch {
			r.writes.behind = max(r.writes.behind, seq)
		}
		r.mu.Unlock()
		return MergeResult{}, fmt.Errorf("%w: %w", kv.ErrUnavailable, err)
	case res.Revision == 0:
		return MergeResult{}, fmt.Errorf("%w (epoch %s ended)", ErrStoreCleared, epoch)
	}
	return res, nil
}
