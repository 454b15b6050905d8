// Package natstest starts embedded NATS servers for the project's tests:
// on 127.0.0.1, on a free port unless one is given, without signal handling
// or logs, with JetStream's store in a temporary directory when asked for,
// and stopped by the test's Cleanup.
//
// It is for tests only: the worker's own embedded server is cmd/worker's,
// and end-to-end tests run nats-server as a process (internal/binaries).
package natstest
