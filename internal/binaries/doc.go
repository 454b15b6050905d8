// Package binaries builds the programs that end-to-end tests and the load
// test run as processes: the worker, from this module, and nats-server, from
// the version go.mod requires.
//
// It only builds and locates them; internal/proctest starts and stops the
// processes, and the tests talk to them.
package binaries
