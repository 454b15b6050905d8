package consumer

import (
	"context"
	"time"

	"flowstate/flowstate"
)

// State is what the worker needs of the flow state: a flowstate.Manager
// (a store of this process) or a flowstate.Replica (a shared store, whose
// changes come from every worker's reports through the store's watch, and
// whose Flush refuses with flowstate.ErrNotPublisher on every worker but
// the publisher, which then publish nothing).
type State interface {
	MergeFlows(ctx context.Context, nodeID uint64, flows []flowstate.Flow) (flowstate.MergeResult, error)
	Snapshot(ctx context.Context, dst []flowstate.Flow) (flowstate.Snapshot, error)
	Version(ctx context.Context) (flowstate.Version, error)
	Sync(ctx context.Context) error
	Flush(ctx context.Context) error
	Nodes(ctx context.Context) ([]flowstate.NodeInfo, flowstate.Version, error)
	EvictSilent(ctx context.Context, cutoff time.Time) ([]uint64, flowstate.MergeResult, error)
	Size() (nodes, flows int)
	Loaded() bool
}

var (
	_ State = (*flowstate.Manager)(nil)
	_ State = (*flowstate.Replica)(nil)
)

// StateChanged tells the worker that the state changed other than through
// its own reports (a Replica's OnChange: another worker's report, or this
// worker became the publisher): it publishes at its next interval.
func (w *Worker) StateChanged() { w.pub.changed() }
