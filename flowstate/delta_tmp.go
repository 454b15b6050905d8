package flowstate

// TEMPORARY: this file stands in for the incremental change tracking of the
// state drivers until it is merged; delete it then. It diffs the current
// snapshot against the snapshot of the previous Delta call, so it costs time
// proportional to the aggregate, not to what changed.

import (
	"context"
	"sync"
)

// tmpDeltaState is what the temporary Delta remembers of one Manager.
type tmpDeltaState struct {
	mu    sync.Mutex // serialises Delta calls; guards the fields below
	valid bool       // prev holds the snapshot of the last call
	prev  Snapshot
	spare []Flow
}

// tmpDeltas maps each *Manager that Delta was called on to its
// *tmpDeltaState (a side table, so that this file needs no field in Manager).
var tmpDeltas sync.Map

// Delta returns what changed in the aggregate since the previous call:
// Base is the revision that call returned (0 in a new epoch, whose base is
// the empty state), Flows the flows whose entry differs, appended to dst[:0]
// (Has == 0: the flow left). The first call on a Manager returns Resync.
// A call at an unchanged version returns no flows, Base equal to Revision.
//
// TEMPORARY: see the top of this file.
func (m *Manager) Delta(ctx context.Context, dst []Flow) (Delta, error) {
	v, _ := tmpDeltas.LoadOrStore(m, &tmpDeltaState{})
	st := v.(*tmpDeltaState)
	st.mu.Lock()
	defer st.mu.Unlock()
	snap, err := m.Snapshot(ctx, st.spare)
	if err != nil {
		return Delta{}, err
	}
	d := Delta{Version: snap.Version, Flows: dst[:0]}
	switch {
	case !st.valid:
		d.Resync = true
	case st.prev.Epoch != snap.Epoch:
		d.Flows = diffFlows(d.Flows, nil, snap.Flows)
	default:
		d.Base = st.prev.Revision
		d.Flows = diffFlows(d.Flows, st.prev.Flows, snap.Flows)
	}
	st.valid = true
	st.spare, st.prev = st.prev.Flows, snap
	return d, nil
}

// diffFlows appends to dst the flows of b that differ from a, and a flow
// with Has == 0 for each flow of a that b lacks; both are sorted by ID.
func diffFlows(dst, a, b []Flow) []Flow {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].ID < b[j].ID):
			dst = append(dst, Flow{ID: a[i].ID})
			i++
		case i == len(a) || b[j].ID < a[i].ID:
			dst = append(dst, b[j])
			j++
		default:
			if a[i] != b[j] {
				dst = append(dst, b[j])
			}
			i++
			j++
		}
	}
	return dst
}
