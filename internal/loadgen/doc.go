// Package loadgen is the project's one load generator, used by `worker
// bench` and the end-to-end load test (e2e/loadtest): simulated flownodes
// sending heartbeat reports to a worker over a NATS connection the caller
// passes in, then an exact check of the worker's final aggregate.
//
// A Generator simulates Config.Nodes nodes with Config.Flows flows each:
// node i (from Config.FirstNode) owns the flow ids i*Flows+1 to
// i*Flows+Flows. Report r of a node (r = 0, 1, ...) is a pure function of
// the node and r mod Rounds, so that a node's report always differs from
// its previous one, and what the aggregate must hold is known from the last
// report each node had acknowledged. Reports are encoded once, ahead of the
// load, when they fit in a budget, so that the generator costs little
// beside the worker.
//
// Two modes: Acked sends each report as a request and keeps a window of
// requests in flight, one per node at most, so that a node's last
// acknowledged report is the one applied last; Publish sends fire and forget
// (the raw and ceiling scenarios), and Sync then sends one request on the
// same connection, whose acknowledgement means that every report published
// before it was handled, as NATS keeps the order of one connection's
// messages and the worker handles its subscription in order.
//
// Check gets the aggregate and compares it, flow by flow, with each node's
// last acknowledged report: it must be exactly their union.
package loadgen
