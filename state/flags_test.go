package state_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/state"
)

// Workers started with different limits on one store hold one state: a
// report that one worker takes and the other would refuse is applied by
// both, at one revision, in every view (the seed's, stats and nodes), so
// that a rolling change of --max-flows serves no two states.
func TestReplicasWithDifferentLimitsHoldOneState(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() state.Store) {
		small := follow(t, open(), state.ReplicaOptions{MaxReportFlows: 4, Limits: state.Limits{MaxFlows: 6, MaxErrors: 2}})
		large := follow(t, open(), state.ReplicaOptions{MaxReportFlows: 10, Limits: state.Limits{MaxFlows: 20, MaxErrors: 20}})
		steps := []struct {
			w   *worker
			rep state.Report
		}{
			{small, healthReport(1, ids(1, 2), ids(2, 3), ids(4))},                  // 4 flows: small's limit
			{large, healthReport(2, ids(11, 12, 13, 14), ids(15, 16), ids(17, 18))}, // 8 flows: past small's
			{large, withError(3, 10)},
			{large, manyErrors(4, 3, 'x')}, // 9 errors: past small's --max-errors
		}
		for i, s := range steps {
			res, err := s.w.mgr.Merge(t.Context(), s.rep)
			require.NoError(t, err, "step %d", i)
			var views [2]struct {
				value flowstate.FlowStateValue
				stats state.Stats
				nodes []state.NodeInfo
			}
			for k, w := range []*worker{small, large} {
				require.NoError(t, w.mgr.Sync(t.Context()))
				value, v := fget(t, w.mgr)
				require.Equal(t, res.Version, v, "step %d, worker %d: the revision of the last report", i, k)
				stats, err := w.mgr.Stats(t.Context())
				require.NoError(t, err)
				require.Equal(t, res.Version, stats.Version)
				nodes, nv, err := w.mgr.Nodes(t.Context())
				require.NoError(t, err)
				require.Equal(t, res.Version, nv)
				for n := range nodes {
					nodes[n].LastReport = nodes[n].LastReport.UTC()
				}
				stats.Nodes = nil // in no order; Health merges them
				views[k].value, views[k].stats, views[k].nodes = value, stats, nodes
			}
			assert.True(t, views[0].value.Equal(views[1].value), "step %d: seed's view %v and %v", i, views[0].value, views[1].value)
			assert.Equal(t, views[0].stats, views[1].stats, "step %d: stats view", i)
			assert.Equal(t, views[0].nodes, views[1].nodes, "step %d: nodes view", i)
			assert.Len(t, views[0].nodes, i+1, "step %d: every report applied", i)
		}
	})
}
