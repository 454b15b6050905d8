package state

import (
	"github.com/flowstate-io/flowstate/flowstate"
)

// Delta is what changed in the aggregate between two published versions
// (PROTOCOL.md v2, flow.state.delta).
type Delta struct {
	// Version is the state's version now.
	flowstate.Version
	// Base is the revision of the previous Delta taken in this epoch; 0 for
	// the first one of an epoch.
	Base uint64
	// Flows holds every flow whose aggregate entry changed since Base,
	// sorted by ID, with its entry now; a Flow with no field present (Has
	// == 0) left the aggregate.
	Flows []flowstate.Flow
	// Resync says that the changes since Base are not known (too many were
	// tracked, or this worker has just started publishing): Flows is empty
	// and clients must take a snapshot.
	Resync bool
}

// minDeltaFlows is the least number of changed flows a Delta carries
// before it asks for a resync; past it, half the aggregate's flows.
const minDeltaFlows = 1024

// deltaLimit is the most changed flows a Delta carries for an aggregate of
// flows flows.
func deltaLimit(flows int) int { return max(minDeltaFlows, flows/2) }

// takeDelta takes the changes of agg since the last Delta into d, with dst's
// memory. resync forces a resync.
func takeDelta(agg *Aggregate, d *Delta, dst []flowstate.Flow, resync bool) {
	_, n := agg.Len()
	flows, ok := agg.TakeChanges(dst, deltaLimit(n))
	d.Flows, d.Resync = flows, resync || !ok
	if d.Resync {
		d.Flows = flows[:0]
	}
}
