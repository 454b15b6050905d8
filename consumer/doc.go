// Package consumer connects the flow state manager to NATS: it applies the
// heartbeat reports that flownodes publish, publishes the aggregate to
// frontends and answers their gets, as PROTOCOL.md describes.
//
// A Worker holds one queue-group subscription on <prefix>.heartbeat.*. The
// NATS client delivers its messages to one goroutine, in arrival order, and
// the Worker applies each one there before it takes the next: reports are
// never applied in parallel. A report sent as a request is acknowledged only
// once it has been applied, so a get that follows the ack sees it.
//
// After a report that changed the aggregate, the Worker publishes the
// aggregate on <prefix>.state, coalesced to one update per PublishInterval:
// the first change after a quiet interval goes out at once, later changes go
// out together at the end of the interval, and the last state is always
// published. The aggregate key of the store is written at the same cadence.
// At the same moments it publishes what changed on <prefix>.state.delta
// (protocol v2; Config.StateUpdates chooses either or both), or a resync
// delta when that would not fit the max payload.
//
// The get endpoint (<prefix>.state.get) is an endpoint of the NATS micro
// service "flowstate", so $SRV.PING, $SRV.INFO and $SRV.STATS discover it.
// Gets are served from an encoding cached per state version. A get with
// Flow-State-Chunks: 1 is answered with the aggregate split into chunks of
// ascending flow ids, each within the max payload (chunks.go), so that a
// state of any size can be read.
//
// With a manager that follows a store shared by several workers
// (flowstate.Manager.Follow, a JetStream bucket), every worker of the queue
// group serves the one state: an ack waits until the report is stored and
// in this worker's state, a get runs the manager's read barrier first (if
// JetStream cannot answer it, the get serves this worker's state), changes
// come from the manager (every worker's reports), and only the worker that
// holds the publisher lease writes the aggregate key and publishes. A report
// the store cannot take is answered 503 (judge), and nothing is acked.
package consumer
