package state

import (
	"context"
	"fmt"

	"github.com/flowstate-io/flowstate/kv"
)

// Merge writes a node's report and returns once the watch has applied it,
// so that the report is visible at once to a get on this worker: Submit,
// then its outcome. The worker never waits for one report: tests do.
func (r *Replica) Merge(ctx context.Context, rep Report) (MergeResult, error) {
	nodeID := rep.Node
	w := &awaitedOutcome{done: make(chan struct{})}
	if err := r.Submit(ctx, rep, w); err != nil {
		return MergeResult{}, err
	}
	select {
	case <-w.done:
		return w.res, w.err
	case <-ctx.Done():
		return MergeResult{}, fmt.Errorf("state: report of node %d: %w: %w", nodeID, kv.ErrUnavailable, ctx.Err())
	}
}

// awaitedOutcome is the Completion of Merge.
type awaitedOutcome struct {
	res  MergeResult
	err  error
	done chan struct{}
}

func (a *awaitedOutcome) Complete(res MergeResult, err error) {
	a.res, a.err = res, err
	close(a.done)
}
