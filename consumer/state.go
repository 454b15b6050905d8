package consumer

import (
	"context"
	"time"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// State is what the Worker needs of the flow state: the few methods it
// calls, declared here at their user. A state.Manager (the state of one
// worker) satisfies it, and so does a replica that follows a store shared
// by several workers. The Worker calls MergeFlows and EvictSilent from one
// goroutine at a time each; every other method may be called concurrently
// with them.
type State interface {
	// MergeFlows applies a node's report (flows sorted by ID) and says
	// whether the aggregate changed. An error wrapping
	// state.ErrCapacity means the report was refused and nothing
	// changed.
	MergeFlows(ctx context.Context, nodeID uint64, flows []flowstate.Flow) (state.MergeResult, error)
	// Snapshot returns the aggregate, reusing dst's memory.
	Snapshot(ctx context.Context, dst []flowstate.Flow) (state.Snapshot, error)
	// Version returns the version of the state now.
	Version(ctx context.Context) (flowstate.Version, error)
	// Sync waits until the state holds every write acknowledged before the
	// call (a shared store's read barrier); a local state returns at once.
	Sync(ctx context.Context) error
	// Flush writes the aggregate key. state.ErrNotPublisher means that
	// another worker publishes: this one publishes nothing.
	Flush(ctx context.Context) error
	// Nodes returns a copy of the per-node view, by ID, taken under the
	// state's lock, with the version it belongs to.
	Nodes(ctx context.Context) ([]state.NodeInfo, flowstate.Version, error)
	// EvictSilent removes the nodes whose last report is older than cutoff.
	EvictSilent(ctx context.Context, cutoff time.Time) ([]uint64, state.MergeResult, error)
	// Loaded reports whether the state has read its store's content.
	Loaded() bool
	// Size returns how many nodes and flows the state holds.
	Size() (nodes, flows int)
}

var _ State = (*state.Manager)(nil)
