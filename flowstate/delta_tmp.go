package flowstate

// TEMPORARY: this file stands in for the incremental change tracking of the
// state drivers until it is merged; delete it then. It diffs snapshots, so it
// costs time proportional to the aggregate, not to what changed, and it sees
// only the states it is shown: the snapshots of its Delta calls, and those
// the worker served to gets (SnapshotServed). A delta lists every flow that
// differs between any two of those since the previous delta, so that a
// client holding any of them (a published delta's, a get's) may apply it.

import (
	"context"
	"slices"
	"sync"
)

// tmpDeltaState is what the temporary Delta remembers of one Manager.
type tmpDeltaState struct {
	mu       sync.Mutex // serialises Delta and SnapshotServed; guards the fields below
	valid    bool       // seen holds a state
	seen     Snapshot   // the last state shown: a Delta's or a served one
	base     uint64     // the revision of the last Delta in seen's epoch; 0 if none
	touched  map[FlowID]bool
	spare    []Flow
	scratch  []Flow
	resynced bool // the first Delta was returned
}

// tmpDeltas maps each *Manager that Delta was called on to its
// *tmpDeltaState (a side table, so that this file needs no field in Manager).
var tmpDeltas sync.Map

func tmpDeltaOf(m *Manager) *tmpDeltaState {
	v, _ := tmpDeltas.LoadOrStore(m, &tmpDeltaState{touched: make(map[FlowID]bool)})
	return v.(*tmpDeltaState)
}

// SnapshotServed is Snapshot for a state about to be served to a client:
// the next delta also covers the changes since it. Taking and noting the
// state is one step with respect to Delta, so that no delta can be taken
// between them and miss it.
//
// TEMPORARY: see the top of this file.
func (m *Manager) SnapshotServed(ctx context.Context, dst []Flow) (Snapshot, error) {
	st := tmpDeltaOf(m)
	st.mu.Lock()
	defer st.mu.Unlock()
	s, err := m.Snapshot(ctx, dst)
	if err == nil {
		st.noteLocked(s)
	}
	return s, err
}

// noteLocked makes s the last state seen, adding what changed since the one
// before to touched.
func (st *tmpDeltaState) noteLocked(s Snapshot) {
	switch {
	case !st.valid || s.Epoch != st.seen.Epoch:
		// A new epoch starts from the empty state at revision 0.
		clear(st.touched)
		st.base = 0
		st.scratch = diffFlows(st.scratch[:0], nil, s.Flows)
	case s.Revision <= st.seen.Revision:
		return
	default:
		st.scratch = diffFlows(st.scratch[:0], st.seen.Flows, s.Flows)
	}
	for _, f := range st.scratch {
		st.touched[f.ID] = true
	}
	st.valid = true
	st.seen.Version = s.Version
	st.seen.Flows = append(st.seen.Flows[:0], s.Flows...)
}

// Delta returns what changed in the aggregate since the previous call:
// Base is the revision that call returned (0 in a new epoch, whose base is
// the empty state), Flows every flow that differed between any two states
// seen since (see the top of this file), with its entry now, appended to
// dst[:0] (Has == 0: the flow is not in the aggregate). The first call on a
// Manager returns Resync. A call at an unchanged version returns no flows,
// Base equal to Revision.
//
// TEMPORARY: see the top of this file.
func (m *Manager) Delta(ctx context.Context, dst []Flow) (Delta, error) {
	st := tmpDeltaOf(m)
	st.mu.Lock()
	defer st.mu.Unlock()
	snap, err := m.Snapshot(ctx, st.spare)
	if err != nil {
		return Delta{}, err
	}
	st.spare = snap.Flows
	d := Delta{Version: snap.Version, Flows: dst[:0]}
	st.noteLocked(snap)
	if !st.resynced {
		st.resynced = true
		d.Resync = true
	} else {
		d.Base = st.base
		ids := make([]FlowID, 0, len(st.touched))
		for id := range st.touched {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			i, ok := slices.BinarySearchFunc(snap.Flows, id, func(f Flow, id FlowID) int { return cmpID(f.ID, id) })
			if ok {
				d.Flows = append(d.Flows, snap.Flows[i])
			} else {
				d.Flows = append(d.Flows, Flow{ID: id})
			}
		}
	}
	clear(st.touched)
	st.base = snap.Revision
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
