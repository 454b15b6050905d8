// Package kv defines the key-value store that workers share (Shared), and
// SharedMemory, an in-memory implementation of it for tests of what several
// processes do. The store on a NATS JetStream key-value bucket is in package
// kv/jetstream, so that this package and the domain do not link nats.go. A
// worker that alone holds its state (--kv memory) keeps no store: its state
// is package state's Manager.
//
// The interface follows how GreptimeDB's FlowStateManager uses its KvBackend:
// get, put and delete. Two things are added so that a store shared by several
// processes (a NATS JetStream key-value bucket) fits behind it:
//
//   - Every write returns a Revision: the sequence number the store gave it,
//     and the epoch of the store it landed in. Sequence numbers only grow.
//   - The epoch names the store's lineage. It changes whenever the store starts
//     over empty (a purge, or a bucket that was deleted and created again), so
//     a caller that caches what it wrote can tell that its cache is stale.
//
// A store that several processes share offers more (Shared): conditional
// writes (Conditional, where the revision is the lock across processes), an
// ordered watch of every write (Watcher), and errors that wrap
// ErrUnavailable when it cannot take writes. Package kv/jetstream
// documents the bucket's layout, its epoch key and how it behaves when
// JetStream is unavailable; package kvtest is the contract every Store
// (Run) and every Shared store (RunShared) passes.
//
// It owns the interfaces and the in-memory stores only: what the keys mean
// is package state's (the values' stored form package flowstate's), the
// publisher lease package lease's, and nats.go package kv/jetstream's. It
// imports nothing but the standard library.
package kv
