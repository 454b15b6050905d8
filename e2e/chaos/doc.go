// Package chaos is the worker's robustness test: many clients send reports
// and gets to real worker and nats-server processes while a nemesis kills,
// pauses and restarts them and purges the bucket; every operation is
// recorded with its invocation and completion times, and the history is
// checked for linearizability against a model of the worker
// (github.com/anishathalye/porcupine).
//
// The short run is part of `go test ./...`; `make chaos` runs it for
// CHAOS_DURATION (default 10m) with a random seed, or CHAOS_SEED to replay.
package chaos
