package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/lease"

	"github.com/flowstate-io/flowstate/flowstate"
)

// The operations of a Replica, the same as a Manager's where they mean the
// same. The served state is what the watch applied: reads do no store I/O.

// servedLocked reports whether the served state includes the write seq.
func (r *Replica) servedLocked(seq uint64) bool {
	return r.ready && !r.frozen && r.watermark >= seq
}

// behindLocked returns an error while a write that a merge gave up waiting
// for has not come back through the watch.
func (r *Replica) behindLocked() error {
	if r.behind > r.watermark {
		return fmt.Errorf("flowstate: the store's watch has not reached revision %d yet: %w", r.behind, kv.ErrUnavailable)
	}
	return nil
}

// checkLocked is what the reads check before serving.
func (r *Replica) checkLocked() error {
	switch {
	case r.stopped:
		return errStopped
	case !r.ready:
		return errNotReady
	}
	return nil
}

// MergeFlows writes a node's report (flows sorted by ID, each ID once:
// ErrUnsortedFlows otherwise) to the node's key and returns once the
// watch has applied it, so that the report is visible at once to a get on
// this worker: Submit, then Wait. It fails with an error wrapping
// kv.ErrUnavailable after ApplyTimeout, and with a *CapacityError, before
// it writes, if the report would take this replica's state past
// ReplicaOptions.Limits.
func (r *Replica) MergeFlows(ctx context.Context, nodeID uint64, flows []flowstate.Flow) (MergeResult, error) {
	p, err := r.Submit(ctx, nodeID, flows)
	if err != nil {
		return MergeResult{}, err
	}
	defer p.Release()
	return p.Wait(ctx)
}

// awaitApplied waits until the served state includes the write seq of
// epoch, and returns the result of the writes since revision rev. If the
// watch does not get there within ApplyTimeout, the next merges fail at
// once until it does, rather than queue behind this wait.
func (r *Replica) awaitApplied(ctx context.Context, epoch string, seq, rev uint64) (MergeResult, error) {
	wctx, cancel := context.WithTimeout(ctx, r.opts.ApplyTimeout)
	defer cancel()
	var res MergeResult
	err := r.await(wctx, func() bool {
		if r.epoch != epoch {
			return true
		}
		if !r.servedLocked(seq) {
			return false
		}
		res = r.resultLocked(epoch, seq, rev)
		return true
	})
	switch {
	case err != nil:
		r.mu.Lock()
		if r.epoch == epoch {
			r.behind = max(r.behind, seq)
		}
		r.mu.Unlock()
		return MergeResult{}, fmt.Errorf("%w: %w", kv.ErrUnavailable, err)
	case res.Revision == 0:
		return MergeResult{}, fmt.Errorf("%w (epoch %s ended)", ErrStoreCleared, epoch)
	}
	return res, nil
}

// resultLocked is the result of a write seq of epoch, served, for a
// writer that saw revision rev served before it wrote. Its revision is the
// write's own: the one revision at which the report took effect, so that
// no two reports are acked with the same revision (the state served may be
// further on already; a get after the ack shows at least this revision).
func (r *Replica) resultLocked(epoch string, seq, rev uint64) MergeResult {
	return MergeResult{Version: flowstate.Version{Epoch: epoch, Revision: seq}, Changed: r.changeRev > rev}
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
	return r.ready && !r.stopped && r.watermark >= acquired
}

// EvictSilent deletes the key of every node whose last report was written
// before cutoff, as Manager.EvictSilent does, and waits until the watch has
// applied the deletions. Only the publisher evicts, for every worker: on
// the others it does nothing. Each deletion is conditional on the node's
// last write, so a report that came in meanwhile stays.
func (r *Replica) EvictSilent(ctx context.Context, cutoff time.Time) ([]uint64, MergeResult, error) {
	publisher := r.Publisher()
	type silent struct{ id, rev uint64 }
	var nodes []silent
	r.mu.Lock()
	err := r.checkLocked()
	epoch, rev := r.epoch, r.rev
	if err == nil && publisher {
		for id, n := range r.nodes {
			if n.seen.Before(cutoff) {
				nodes = append(nodes, silent{id, n.rev})
			}
		}
	}
	r.mu.Unlock()
	res := MergeResult{Version: flowstate.Version{Epoch: epoch, Revision: rev}}
	if err != nil {
		return nil, res, err
	}
	var evicted []uint64
	var last uint64
	for _, n := range nodes {
		key := flowstate.NodeKey(n.id)
		del, err := r.store.DeleteIf(ctx, key, kv.Condition{Key: key, Revision: n.rev})
		if errors.Is(err, kv.ErrRevisionMismatch) {
			continue // it reported again
		}
		if err != nil {
			return evicted, res, fmt.Errorf("flowstate: evict node %d: %w", n.id, err)
		}
		evicted = append(evicted, n.id)
		last = del.Seq
	}
	if last == 0 {
		return evicted, res, nil
	}
	done, err := r.awaitApplied(ctx, epoch, last, rev)
	if err != nil {
		return evicted, res, fmt.Errorf("flowstate: evictions not seen by the watch: %w", err)
	}
	return evicted, done, nil
}

// Flush writes the aggregate key, fenced on the publisher lease, if this
// worker is the publisher and the aggregate changed since it last wrote it;
// ErrNotPublisher if it is not the publisher.
func (r *Replica) Flush(ctx context.Context) error {
	r.aggMu.Lock()
	defer r.aggMu.Unlock()
	err := r.lease.WithFence(func(fence, acquired uint64) error {
		r.mu.Lock()
		if !r.publisherLocked(acquired) {
			r.mu.Unlock()
			return ErrNotPublisher
		}
		rev, epoch := r.rev, r.epoch
		if rev == 0 || (r.wroteRev != 0 && r.changeRev <= r.wroteRev) {
			r.mu.Unlock()
			return nil
		}
		r.aggFlows = r.appendServedLocked(r.aggFlows[:0])
		r.mu.Unlock()
		r.aggJSON = flowstate.AppendJSON(r.aggJSON[:0], r.aggFlows)
		_, err := r.store.PutIf(ctx, flowstate.StateKey, r.aggJSON, kv.Condition{Key: PublisherKey, Revision: fence})
		if errors.Is(err, kv.ErrRevisionMismatch) && r.stillHeld(ctx, fence) {
			// Refused, though the lease is still this worker's: the store
			// does not honour the fence (a server too old for it). Not a
			// lost lease: the state is still published; logged once.
			if !r.fenceRefused {
				r.fenceRefused = true
				r.log.Error("the store refused the aggregate write fenced on the publisher lease, which this worker still holds; the state is published, the aggregate key is not written",
					slog.String("key", flowstate.StateKey), slog.Any("err", err))
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("flowstate: store aggregate: %w", err)
		}
		r.fenceRefused = false
		r.mu.Lock()
		if r.epoch == epoch {
			r.wroteRev = rev
		}
		r.mu.Unlock()
		return nil
	})
	if errors.Is(err, lease.ErrNotHeld) {
		return ErrNotPublisher
	}
	return err
}

// stillHeld reports whether the lease key's last write is still fence,
// this worker's.
func (r *Replica) stillHeld(ctx context.Context, fence uint64) bool {
	e, err := r.store.Get(ctx, PublisherKey)
	return err == nil && e.Revision == fence
}

// appendServedLocked appends the served aggregate to dst.
func (r *Replica) appendServedLocked(dst []flowstate.Flow) []flowstate.Flow {
	if r.frozen {
		return append(dst, r.frozenFlows...)
	}
	return r.agg.AppendFlows(dst)
}

// Snapshot returns the served aggregate as flows appended to dst[:0], with
// its version.
func (r *Replica) Snapshot(_ context.Context, dst []flowstate.Flow) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLocked(); err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Version: flowstate.Version{Epoch: r.epoch, Revision: r.rev}, Flows: r.appendServedLocked(dst[:0])}, nil
}

// Version returns the served version.
func (r *Replica) Version(context.Context) (flowstate.Version, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLocked(); err != nil {
		return flowstate.Version{}, err
	}
	return flowstate.Version{Epoch: r.epoch, Revision: r.rev}, nil
}

// Sync is a read barrier: it waits until the state includes every write
// the store had taken when Sync was called, so that a get that follows
// includes every report any worker acknowledged before. It gives up after
// ApplyTimeout, or at once when the store is unavailable, with an error
// wrapping kv.ErrUnavailable; the state is then only as recent as the
// watch made it.
func (r *Replica) Sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.ApplyTimeout)
	defer cancel()
	if err := r.await(ctx, func() bool { return r.ready }); err != nil {
		return fmt.Errorf("%w: %w", errNotReady, err)
	}
	r.mu.Lock()
	err := r.behindLocked()
	r.mu.Unlock()
	if err != nil {
		return err
	}
	last, err := r.store.LastRevision(ctx)
	if err != nil {
		return fmt.Errorf("flowstate: sync: %w", err)
	}
	r.mu.Lock()
	epoch := r.epoch
	r.mu.Unlock()
	if last.Epoch != "" && epoch != "" && last.Epoch != epoch {
		// The store started over and the watch has not told us yet: the
		// state of the old epoch may differ from another worker's.
		return fmt.Errorf("flowstate: sync: the store is in epoch %s, the state still in %s: %w", last.Epoch, epoch, kv.ErrUnavailable)
	}
	return r.await(ctx, func() bool { return r.servedLocked(last.Seq) })
}

// Delta returns what changed in the served aggregate since the previous
// Delta of this epoch, with dst's memory, as Manager.Delta does. Its first
// Delta after this worker became the publisher, or after the watch read
// the store again, asks clients to resync. While the watch is catching up
// (the served state is held), it returns no change: the previous delta's
// version, as Base and as Version.
func (r *Replica) Delta(_ context.Context, dst []flowstate.Flow) (Delta, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLocked(); err != nil {
		return Delta{}, err
	}
	d := Delta{Version: flowstate.Version{Epoch: r.epoch, Revision: r.rev}, Base: r.deltaBase, Flows: dst[:0]}
	if r.frozen {
		// What changed is taken once the watch is exact again: until then,
		// no change since the last delta.
		d.Revision = r.deltaBase
		return d, nil
	}
	takeDelta(r.agg, &d, dst, r.resync)
	r.resync = false
	r.deltaBase = r.rev
	return d, nil
}

// Nodes returns the nodes whose reports make up the served aggregate, by
// ID, with its version; LastReport is when the store took the node's last
// write. It holds the lock only to copy them.
func (r *Replica) Nodes(context.Context) ([]NodeInfo, flowstate.Version, error) {
	r.mu.Lock()
	if err := r.checkLocked(); err != nil {
		r.mu.Unlock()
		return nil, flowstate.Version{}, err
	}
	out := copyNodes(r.agg, func(id uint64) time.Time { return r.nodes[id].seen })
	v := flowstate.Version{Epoch: r.epoch, Revision: r.rev}
	r.mu.Unlock()
	sortNodes(out)
	return out, v, nil
}

// Size returns the number of nodes and of flows that the watch applied.
func (r *Replica) Size() (nodes, flows int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.agg.Len()
}
