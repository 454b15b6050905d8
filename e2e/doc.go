// Package e2e tests the worker end to end: it builds cmd/worker and
// nats-server once, runs them as separate processes on 127.0.0.1, and checks
// PROTOCOL.md through the wire only (NATS messages, exit codes, stderr).
//
// Every wait is bounded and synchronises on a fact: an ack, a revision, a
// received message, a log line or a process exit.
//
// It owns the behaviour seen from outside, not the code: it imports no
// worker package (consumer, kv, cmd/worker), only client, codec, flowstate
// and the internal helpers (binaries, loadgen). The JavaScript client of
// e2e/js checks the same contract from another language; e2e/loadtest
// measures performance.
package e2e
