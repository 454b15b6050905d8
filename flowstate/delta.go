package flowstate

// Delta is what changed in the aggregate between two published versions
// (PROTOCOL.md v2, flow.state.delta).
type Delta struct {
	// Version is the state's version now.
	Version
	// Base is the revision of the previous Delta taken in this epoch; 0 for
	// the first one of an epoch.
	Base uint64
	// Flows holds every flow whose aggregate entry changed since Base,
	// sorted by ID, with its entry now; a Flow with no field present (Has
	// == 0) left the aggregate.
	Flows []Flow
	// Resync says that the changes since Base are not known (too many were
	// tracked, or this worker has just started publishing): Flows is empty
	// and clients must take a snapshot.
	Resync bool
}
