// Package client talks to the flow state worker over NATS, as PROTOCOL.md
// describes, for the two kinds of integrators:
//
//   - A flownode sends its heartbeat report: Client.Publish sends it without an
//     acknowledgement, Client.Send as a request that returns once the worker
//     has applied it, with the state's version (its epoch and revision). A
//     report the worker rejects returns a *ServiceError with code 400 and the
//     worker's reason.
//   - A frontend reads the aggregate: Client.Get takes a snapshot (decoded
//     into a flowstate.FlowStateValue, with its version), Client.GetJSON the
//     exact serde_json bytes GreptimeDB would store, and Client.Watch follows
//     the live state: it subscribes to <prefix>.state first, then takes a
//     snapshot, and yields states in revision order, never twice and never
//     backwards, starting over from a new snapshot when the epoch changes.
//
// The load generator of `worker bench` and the load test is not part of the
// client API: it is internal/loadgen, built on this package.
//
// The connection is the caller's: the package never dials, and never closes
// or drains the *nats.Conn it is given. A Client is safe for concurrent use.
package client
