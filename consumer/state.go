package consumer

import (
	"context"
	"time"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// State is what the Worker serves in either mode: the few methods it calls,
// declared here at their user. The Worker calls EvictSilent from one
// goroutine at a time; every other method may be called concurrently with
// it and with the intake of reports.
type State interface {
	// Snapshot returns the aggregate, reusing dst's memory.
	Snapshot(ctx context.Context, dst []flowstate.Flow) (state.Snapshot, error)
	// Version returns the version of the state now.
	Version(ctx context.Context) (flowstate.Version, error)
	// Delta returns the flows that changed since its previous call.
	Delta(ctx context.Context, dst []flowstate.Flow) (state.Delta, error)
	// Nodes returns a copy of the per-node view, by ID, taken under the
	// state's lock, with the version it belongs to.
	Nodes(ctx context.Context) ([]state.NodeInfo, flowstate.Version, error)
	// EvictSilent removes the nodes whose last report is older than cutoff.
	EvictSilent(ctx context.Context, cutoff time.Time) ([]uint64, state.MergeResult, error)
	// Size returns how many nodes and flows the state holds.
	Size() (nodes, flows int)
	// ErrorBytes returns the bytes of error messages (v3 last_errors) the
	// state holds over all nodes.
	ErrorBytes() int
	// Errors returns the number of errors (v3 last_errors) the state
	// holds over all nodes.
	Errors() int
	// Stats returns the flow stats (the stats view of a get) at one
	// version.
	Stats(ctx context.Context) (state.Stats, error)
}

// Local is a state that this worker alone holds (a state.Manager, --kv
// memory): the heartbeat goroutine applies each report before it takes the
// next, and acks it once Merge has returned.
type Local interface {
	State
	// Merge applies a node's report and says whether the aggregate
	// changed. An error wrapping state.ErrCapacity means the report was
	// refused and nothing changed.
	Merge(ctx context.Context, rep state.Report) (state.MergeResult, error)
}

// Shared is the state of a store that several workers share (a
// state.Replica, --kv jetstream): reports are pipelined (pipeline.go), a
// get passes a read barrier first, only the worker that holds the publisher
// lease writes the aggregate key and publishes, and the state tells the
// publisher of every change it serves.
type Shared interface {
	State
	// Submit takes a report and answers c, in the order of the Submit and
	// Refuse calls, once its write is stored and applied, or with why not.
	// It blocks while the window of reports waiting for their answers is
	// full, until ctx ends: then it returns an error and c is not called.
	Submit(ctx context.Context, rep state.Report, c state.Completion) error
	// Refuse answers c with err in its turn, as Submit does.
	Refuse(ctx context.Context, err error, c state.Completion) error
	// Drain waits until every report given is answered, or ctx ends; then
	// it answers those left with an error wrapping context.Cause(ctx).
	Drain(ctx context.Context)
	// Changes receives after each change of the served state, or when
	// this worker becomes the publisher.
	Changes() <-chan struct{}
	// Sync waits until the state holds every write acknowledged before the
	// call: the read barrier of a get.
	Sync(ctx context.Context) error
	// Flush writes the aggregate key. state.ErrNotPublisher means that
	// another worker publishes: this one publishes nothing.
	Flush(ctx context.Context) error
	// Loaded reports whether the state has read its store's content.
	Loaded() bool
}

var (
	_ Local  = (*state.Manager)(nil)
	_ Shared = (*state.Replica)(nil)
)
