// Package consumer is the worker's NATS edge: it applies the heartbeat
// reports that flownodes send, publishes the aggregate to frontends and
// answers their gets and node-view requests, as PROTOCOL.md describes. It
// knows NATS and the domain types (packages flowstate and state); the state
// itself is behind small interfaces declared here, one per mode, and
// cmd/worker builds the one of its mode and hands it over: a Local state
// (New: a state.Manager that this worker alone holds) or a Shared one
// (NewShared: a state.Replica of a store that several workers share).
//
// What it owns:
//
//   - Intake. A Worker holds one queue-group subscription on
//     <prefix>.heartbeat.*. The NATS client delivers its messages to one
//     goroutine, in arrival order, and the Worker takes each one there
//     before the next: reports are never applied in parallel. Each report
//     is one value (heartbeat, intake.go) from its arrival to its answer,
//     and one type per mode takes it (intake): a Local state applies it
//     there (localIntake: Merge), and it is acknowledged once that has
//     returned; a Shared state takes it without waiting for its store
//     (sharedIntake, pipeline.go: Submit) and answers it, in arrival
//     order, once its write is stored and applied by this worker's watch,
//     through the heartbeat's Complete. Either way a get that follows an
//     ack sees the report.
//   - Publishing. After a change, the Worker writes the aggregate key
//     (Shared.Flush) and publishes the aggregate on <prefix>.state and what
//     changed on <prefix>.state.delta (protocol v2; Config.StateUpdates
//     chooses either or both; a resync delta when one would not fit),
//     coalesced to one update per PublishInterval: the first change after a quiet
//     interval goes out at once, later ones together at the end of the
//     interval, and the last state always. Config.FullInterval spaces the
//     full updates on <prefix>.state further apart (deltas and the
//     aggregate key keep PublishInterval): at most one per FullInterval,
//     and the last change always, once due. One signal tells the publisher
//     of a change: the worker's own, after a report that changed a Local
//     state, or a Shared state's (Changes), for every change it serves,
//     this worker's reports included. Where Shared.Flush answers
//     state.ErrNotPublisher (another worker holds the publisher lease),
//     nothing is published.
//   - The micro service "flowstate" ($SRV.PING, $SRV.INFO, $SRV.STATS;
//     its metadata names the prefix and what Config.Metadata adds) with
//     its get (<prefix>.state.get) and nodes (<prefix>.state.nodes)
//     endpoints, each served from an encoding cached per state version, each
//     with a bounded queue (Config.EndpointPendingMsgs): a flood is dropped
//     and counted (Stats.EndpointOverflows), and a request after it waits
//     for at most that queue. A node view that cannot fit the max payload is
//     refused from the node count, before anything is copied or encoded. A
//     get with Flow-State-Chunks: 1 is answered with the aggregate split
//     into chunks of ascending flow ids, each within the max payload
//     (chunks.go), so that a state of any size can be read.
//   - One error path. Handlers return errors; one function (fail, in
//     errors.go) turns an error into a code (400 bad input, 413 too large,
//     503 unavailable or shutting down, 507 a capacity limit
//     (state.ErrCapacity), 500 anything else), an error reply with the
//     service error headers, a counter by reason and one log line with fixed
//     keys (subject, node_id, reason, code, err). Every log line a remote
//     peer can trigger goes through one rate-limiter (logThrottled, on
//     internal/throttle), and the subject tokens and reasons it echoes are
//     cut to a bounded length.
//   - Eviction (Config.NodeTTL): nodes silent past the TTL are evicted, with
//     one log line per sweep.
//   - Shutdown, bounded by its context: intake stops at once, reports
//     already received are applied and acked for half the time left, the
//     rest are dropped and counted (Stats.DroppedAtShutdown), then the last
//     state is published. Handlers run under a base context that Shutdown
//     cancels.
//
// A report the state refuses is answered with its code and nothing is
// acked; a report rejected as bad input (400) may be copied to a
// dead-letter subject, which may not be one the worker consumes or
// publishes (Config.Validate).
package consumer
