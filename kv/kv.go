// Package kv defines the key-value store that the flow state manager keeps its
// keys in, and two in-memory implementations of it: Memory, which one process
// owns, and SharedMemory, a shared store for tests of what several processes do.
// The store on a NATS JetStream key-value bucket, which several workers share,
// is in package kv/jetstream, so that this package and the domain do not link
// nats.go.
//
// The interface follows how GreptimeDB's FlowStateManager uses its KvBackend:
// get, put, range over a prefix, delete and clear. Two things are added so that
// a store shared by several processes (a NATS JetStream key-value bucket) fits
// behind the same interface:
//
//   - Every write returns a Revision: the sequence number the store gave it,
//     and the epoch of the store it landed in. Sequence numbers only grow.
//   - The epoch names the store's lineage. It changes whenever the store starts
//     over empty (Clear, or a bucket that was deleted and created again), so a
//     caller that caches what it wrote can tell that its cache is stale.
//
// A store that several processes share offers more (Shared): conditional
// writes (Conditional, where the revision is the lock across processes), an
// ordered watch of every write (Watcher), and errors that wrap
// ErrUnavailable when it cannot take writes. Package kv/jetstream
// documents the bucket's layout, its epoch key and how it behaves when
// JetStream is unavailable; package kvtest is the contract every Store
// (Run) and every Shared store (RunShared) passes.
package kv

import (
	"context"
	"errors"
)

// ErrNotFound is returned by Get when the key does not exist.
var ErrNotFound = errors.New("kv: key not found")

// Entry is one key with its value and the sequence number of its last write.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
}

// Revision identifies one write: the epoch of the store it landed in and the
// sequence number the store gave it. Within one epoch, sequence numbers
// strictly increase.
type Revision struct {
	Epoch string
	Seq   uint64
}

// Store is a key-value store with revisioned writes.
//
// Implementations are safe for concurrent use. Values passed to Put are not
// retained; values returned are the caller's to keep.
type Store interface {
	// Get returns the entry of key, or ErrNotFound.
	Get(ctx context.Context, key string) (Entry, error)
	// Put sets key to value and returns the revision of the write.
	Put(ctx context.Context, key string, value []byte) (Revision, error)
	// Range returns every entry whose key starts with prefix, in ascending key
	// order.
	Range(ctx context.Context, prefix string) ([]Entry, error)
	// Delete removes key (a missing key is not an error) and returns the
	// revision of the deletion.
	Delete(ctx context.Context, key string) (Revision, error)
	// Clear removes every key and starts a new epoch.
	Clear(ctx context.Context) error
	// Epoch returns the current epoch: an opaque, non-empty string that
	// changes whenever the store starts over empty.
	Epoch(ctx context.Context) (string, error)
}
