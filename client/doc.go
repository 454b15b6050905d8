// Package client talks to the flow state worker over NATS, as PROTOCOL.md
// describes, for the two kinds of integrators:
//
//   - A flownode sends its heartbeat report: Client.Publish sends it without an
//     acknowledgement, Client.Send as a request that returns once the worker
//     has applied it, with the state's version (its epoch and revision). A
//     report the worker rejects returns a *ServiceError with code 400 and the
//     worker's reason. Every report carries, unless the caller set them, the
//     Client's node_epoch (its creation time, unix ms: a restarted process
//     has another) and a seq strictly greater than any the Client gave
//     before (protocol v3), so that a report delayed in the network never
//     replaces a later one of the same Client: the worker refuses it as
//     stale (ErrStale, code 409, from Send; a published one is dropped).
//     One Client per flownode process, its reports sent one after the
//     other, gets that guarantee without a line of code; a Send that timed
//     out is retried with a new seq. Options.Unnumbered sends reports
//     exactly as given instead, as protocol v2 does.
//   - A frontend reads the aggregate: Client.Get takes a snapshot of any
//     size (a chunked get of protocol v2, joined and decoded into a
//     flowstate.FlowStateValue, with its version), Client.GetJSON the exact
//     serde_json bytes GreptimeDB would store, rendered from that snapshot
//     for a state of any size, and Client.Watch follows the
//     live state: it subscribes to the updates first (the deltas on
//     <prefix>.state.delta of a v2 worker, the full updates on <prefix>.state
//     of an older one), then takes a snapshot, and yields states in revision
//     order, never twice and never backwards, each with the flows that
//     changed, taking a new snapshot when it missed a delta or the epoch
//     changed. Client.GetStats reads the flow stats of protocol v3 (per
//     flow the most rows any node processed and the newest errors over the
//     nodes) of any size, in chunks, as a flowstate.StatsView whose
//     AppendJSON is the worker's JSON of the view; Client.GetStatsJSON takes
//     those bytes from the worker in one message.
//
// The load generator of `worker bench` and the load test is not part of the
// client API: it is internal/loadgen, built on this package.
//
// The connection is the caller's: the package never dials, and never closes
// or drains the *nats.Conn it is given. A Client is safe for concurrent use.
//
// It does not link the worker: it takes the wire's names from package
// protocol, the msgpack form from codec and the value types from flowstate,
// and never imports the domain (state, kv, lease), consumer or nats-server:
// flowstate, codec and protocol import only the standard library.
package client
