package state

import (
	"context"
	"fmt"
	"time"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
)

// The reads of a Replica, the same as a Manager's where they mean the same,
// and its read barrier. The served state is what the watch applied: reads
// do no store I/O.

// nodeSeen is what a Replica keeps of a node beside its report.
type nodeSeen struct {
	at       time.Time         // when the store took its last write, by the store's clock: the nodes view's
	heard    time.Time         // when this worker applied it, by its own clock: eviction's
	revision uint64            // the sequence number of its last write
	lineage  lineage           // its processes, as its value says: the stale rule's
	health   *flowstate.Health // its flows' health, never changed once kept; nil: none
}

// deltas is what Delta handed out in the epoch.
type deltas struct {
	base   uint64 // the revision of the last Delta
	resync bool   // the next Delta makes clients resync
}

// checkLocked is what reads and reports check first: the Replica serves.
func (r *Replica) checkLocked() error {
	switch r.phase {
	case following, frozen:
		return nil
	case stopped:
		return errStopped
	}
	return errNotReady
}

// servesLocked reports whether the served state includes the write seq.
func (r *Replica) servesLocked(seq uint64) bool {
	return r.phase == following && r.watch.delivered >= seq
}

func (r *Replica) versionLocked() flowstate.Version {
	return flowstate.Version{Epoch: r.watch.epoch, Revision: r.served.revision}
}

// appendServedLocked appends the served aggregate to dst.
func (r *Replica) appendServedLocked(dst []flowstate.Flow) []flowstate.Flow {
	if r.phase == frozen {
		return append(dst, r.served.frozen...)
	}
	return r.watch.agg.AppendFlows(dst)
}

// Snapshot returns the served aggregate as flows appended to dst[:0], with
// its version.
func (r *Replica) Snapshot(_ context.Context, dst []flowstate.Flow) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLocked(); err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Version: r.versionLocked(), Flows: r.appendServedLocked(dst[:0])}, nil
}

// Version returns the served version.
func (r *Replica) Version(context.Context) (flowstate.Version, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLocked(); err != nil {
		return flowstate.Version{}, err
	}
	return r.versionLocked(), nil
}

// Sync is a read barrier: it waits until the state includes every write
// the store had taken when Sync was called, so that a get that follows
// includes every report any worker acknowledged before. It gives up after
// ApplyTimeout of the worker's clock, or at once when the store is
// unavailable, with an error wrapping kv.ErrUnavailable; the state is then
// only as recent as the watch made it.
func (r *Replica) Sync(ctx context.Context) error {
	ctx, cancel := clock.WithTimeout(ctx, r.opts.Clock, r.opts.ApplyTimeout)
	defer cancel()
	if err := r.await(ctx, func() bool { return r.checkLocked() == nil }); err != nil {
		return fmt.Errorf("%w: %w", errNotReady, err)
	}
	r.mu.Lock()
	epoch, behind, delivered, served := r.watch.epoch, r.writes.behind, r.watch.delivered, r.served.revision
	r.mu.Unlock()
	if behind > delivered {
		return fmt.Errorf("state: the store's watch has not reached revision %d yet: %w", behind, kv.ErrUnavailable)
	}
	last, err := r.store.LastRevision(ctx)
	if err != nil {
		return fmt.Errorf("state: sync: %w", err)
	}
	if last.Epoch != "" && epoch != "" && last.Epoch != epoch {
		// The store started over and the watch has not told us yet: the
		// state of the old epoch may differ from another worker's.
		return fmt.Errorf("state: sync: the store is in epoch %s, the state still in %s: %w", last.Epoch, epoch, kv.ErrUnavailable)
	}
	if last.Seq < served {
		// A store that holds every write it took numbers the barrier past
		// each of them, so past the state served before it was asked: one
		// below that state forgot writes this worker applied (servers
		// restored from an older copy of their stores), and until the
		// watch has noticed, other workers may already serve what it
		// holds now.
		return fmt.Errorf("state: sync: the store's last revision %d is below revision %d of the served state: it forgot writes this worker applied: %w",
			last.Seq, served, kv.ErrUnavailable)
	}
	return r.await(ctx, func() bool { return r.servesLocked(last.Seq) })
}

// Delta returns what changed in the served aggregate since the previous
// Delta of this epoch, with dst's memory, as Manager.Delta does. Its first
// Delta after this worker became the publisher, or after the watch read
// the store again, asks clients to resync. While frozen it returns no
// change: the previous delta's version, as Base and as Version.
func (r *Replica) Delta(_ context.Context, dst []flowstate.Flow) (Delta, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkLocked(); err != nil {
		return Delta{}, err
	}
	d := Delta{Version: r.versionLocked(), Base: r.deltas.base, Flows: dst[:0]}
	if r.phase == frozen {
		// What changed is taken once the watch is exact again: until then,
		// no change since the last delta.
		d.Revision = r.deltas.base
		return d, nil
	}
	takeDelta(r.watch.agg, &d, dst, r.deltas.resync)
	r.deltas.resync = false
	r.deltas.base = r.served.revision
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
	out := copyNodes(r.watch.agg, func(n *NodeInfo) {
		seen := r.watch.nodes[n.ID]
		n.LastReport, n.NodeEpoch, n.HasNodeEpoch = seen.at, seen.lineage.epoch, seen.lineage.hasEpoch
	})
	v := r.versionLocked()
	r.mu.Unlock()
	sortNodes(out)
	return out, v, nil
}

// Size returns the number of nodes and of flows that the watch applied.
func (r *Replica) Size() (nodes, flows int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.watch.agg.Len()
}

// ErrorBytes returns the bytes of error messages of the nodes' health that
// the watch applied, as Limits.MaxErrorBytes counts them.
func (r *Replica) ErrorBytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.watch.errors.bytes
}

// Errors returns the number of errors of the nodes' health that the watch
// applied, as Limits.MaxErrors counts them.
func (r *Replica) Errors() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.watch.errors.count
}
