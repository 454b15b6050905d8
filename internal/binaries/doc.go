// Package binaries builds the programs that end-to-end tests and the load
// test run as processes: the worker, from this module, and nats-server, from
// the version go.mod requires.
//
// It only builds and locates them; starting, stopping and talking to the
// processes is the tests' (e2e, e2e/loadtest).
package binaries
