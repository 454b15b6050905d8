// Command worker keeps the live state of stream-processing flows: it applies
// the heartbeat reports of flownodes from NATS and serves the aggregate to
// frontends, as PROTOCOL.md describes. Run it with --help for its flags.
//
// It owns the wiring and nothing the packages below it do: the one flag,
// environment and usage system of the daemon and of every subcommand
// (flags.go, usage.go), credentials checked once (auth.go), the
// configuration and its validation, the choice of store (an in-memory
// state.Manager, or a state.Replica on a JetStream bucket of package
// kv/jetstream), the embedded NATS server (the only place one is started
// outside tests), the /metrics, /healthz and /readyz HTTP server (ready.go:
// the connection, the store's writes, the prefix check), signals and the
// shutdown order.
//
// One prefix, one state (prefix.go): a worker names its backend, bucket,
// start time and id in its service metadata and looks for the other
// workers of its prefix before it consumes and every few seconds after. It
// never serves beside a worker with another state for longer than a look:
// at start-up it exits 1, and of two that meet at run time the later
// started leaves, both agreeing on which from the metadata alone. A worker
// that names no backend (an older one) is counted, never judged. The subcommands get, watch, send and bench are NATS
// clients of a running worker built on package client (bench on
// internal/loadgen).
//
// It does not own the wire (package protocol, codec), the NATS edge (package
// consumer: intake, replies, publishing), the state and its rules (package
// state; the value and its stored form, package flowstate) or the store
// (package kv).
package main
