// Package kvtest is the contract test of kv.Store (Run) and of kv.Shared
// (RunShared): every implementation runs the same suites, so that a replica
// and the publisher lease can rely on what package kv documents whatever
// holds the keys. The suites wipe the stores they test (Clear, as an
// operator's purge) to check what a new epoch does. Recorder follows a kv.Watcher in
// tests.
//
// Keys used by the suite are made of letters, digits, '_', '-', '/' and '.'
// only, which every planned backend (a NATS JetStream key-value bucket
// included) accepts.
package kvtest
