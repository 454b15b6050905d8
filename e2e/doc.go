// Package e2e tests the worker end to end: it builds cmd/worker and
// nats-server once, runs them as separate processes on 127.0.0.1, and checks
// PROTOCOL.md through the wire only (NATS messages, exit codes, stderr).
//
// Every wait is bounded and synchronises on a fact: an ack, a revision, a
// received message, a log line or a process exit.
package e2e
