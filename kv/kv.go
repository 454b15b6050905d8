package kv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
)

// ErrNotFound is returned by Get when the key does not exist.
var ErrNotFound = errors.New("kv: key not found")

// ErrTooLarge is wrapped by the error of a write whose value is larger than
// the store takes (a NATS server's max payload): nothing was written.
var ErrTooLarge = errors.New("kv: value larger than the store takes")

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
	// Delete removes key (a missing key is not an error) and returns the
	// revision of the deletion.
	Delete(ctx context.Context, key string) (Revision, error)
	// Epoch returns the current epoch: an opaque, non-empty string that
	// changes whenever the store starts over empty.
	Epoch(ctx context.Context) (string, error)
}

// NewEpoch returns a new epoch: 16 random hex digits, so that a store that
// starts over never shares an epoch with an earlier one.
func NewEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
