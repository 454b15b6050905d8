package kv

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// What a store shared by several processes offers beyond Store. The
// JetStream store (package kv/jetstream) and SharedMemory implement all of
// it.

// DefaultWindow is how many writes a shared store keeps in flight without
// waiting for their answers, and how many reports a state on it lets wait
// for theirs, unless configured otherwise (the JetStream store's
// Config.Window, state.ReplicaOptions.Window, the worker's --kv-window):
// the two must agree, so they share this default.
const DefaultWindow = 256

// ErrUnavailable is wrapped by the errors of a shared store that cannot be
// reached or cannot take writes at the moment (no quorum, bucket or server
// unreachable, the operation timed out). A write that fails with it may or
// may not have been stored. The store recovers by itself when the backend
// comes back.
var ErrUnavailable = errors.New("kv: store unavailable")

// ErrRevisionMismatch is returned by a conditional write whose Condition
// does not hold: another write came first.
var ErrRevisionMismatch = errors.New("kv: revision mismatch")

// MismatchError is a conditional write's refusal that says what the
// condition's key held: the sequence number of its last write. It wraps
// ErrRevisionMismatch.
type MismatchError struct {
	Last uint64 // the condition key's last write as the store had it
	Err  error  // the store's refusal
}

func (e *MismatchError) Error() string { return e.Err.Error() }

// Unwrap returns the store's refusal, which wraps ErrRevisionMismatch.
func (e *MismatchError) Unwrap() error { return e.Err }

// LastWriteOf returns the last write of the condition's key that a
// refusal of a conditional write names, if it names one.
func LastWriteOf(err error) (uint64, bool) {
	var m *MismatchError
	if errors.As(err, &m) {
		return m.Last, true
	}
	return 0, false
}

// Condition makes a write conditional on the last write of a key (the key
// written, or another one): the write happens only if the sequence number of
// that key's last write, a deletion included, is Revision. Revision 0 means
// that the key has never been written (or was wiped with the store).
type Condition struct {
	Key      string
	Revision uint64
}

// NoCondition is the zero Condition: where a write takes one (PutAsync), the
// write is unconditional. (A Condition on a key, even with Revision 0, has a
// non-empty Key.)
var NoCondition Condition

// Conditional is a store with compare-and-set writes. Across processes, the
// revision is the lock.
type Conditional interface {
	// PutIf is Put if cond holds, and ErrRevisionMismatch otherwise.
	PutIf(ctx context.Context, key string, value []byte, cond Condition) (Revision, error)
	// DeleteIf is Delete if cond holds, and ErrRevisionMismatch otherwise.
	DeleteIf(ctx context.Context, key string, cond Condition) (Revision, error)
}

// Op is the kind of an Event.
type Op uint8

// The kinds of Event.
const (
	// OpPut: Key was set to Value.
	OpPut Op = iota + 1
	// OpDelete: Key was deleted (or purged).
	OpDelete
	// OpReset: the watch (re)starts at epoch Revision.Epoch. Forget every
	// key: each key's last write follows (deletions included), then
	// OpSynced. Revision.Seq,
	// if not 0, is where the epoch began: an entry with a lower sequence
	// number is a write of the last epoch that the store took after it was
	// cleared and before the new epoch began, and is no part of this one.
	OpReset
	// OpSynced: every entry the store held when the watch (re)started has
	// been delivered; live writes follow.
	OpSynced
)

func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpReset:
		return "reset"
	case OpSynced:
		return "synced"
	}
	return "unknown"
}

// Event is one step of a Watch.
type Event struct {
	Op    Op
	Key   string // OpPut and OpDelete
	Value []byte // OpPut; the callee's to keep
	// Revision is the epoch and the sequence number of the write; for
	// OpSynced, of the last write delivered so far (0 if none).
	Revision Revision
	// Time is when the store took the write (OpPut and OpDelete), by the
	// store's clock.
	Time time.Time
	// Exact reports that the events delivered since the last OpReset, this
	// one included, give exactly the store's content as of Revision.Seq. A
	// watch that falls behind may skip writes the store has already
	// replaced with later ones (a bucket keeps one value per key); until it
	// has delivered those later writes, what it delivered is not a state
	// the store ever had, and Exact is false. Always false before OpSynced.
	Exact bool
}

// Watcher is a store whose writes can be followed in the order the store
// made them.
type Watcher interface {
	// Watch calls fn, from one goroutine, with OpReset, then each key's
	// last write in sequence order (OpPut, or OpDelete for a key whose last
	// write is a deletion, so that a Condition can be made on any key the
	// watch delivered), then OpSynced, then every later write in sequence
	// order. When the store starts over (cleared, wiped or recreated
	// by anyone) or the watch has to start over, it calls fn with OpReset
	// again and repeats. It returns when ctx ends, with ctx's error, or when
	// it cannot go on.
	Watch(ctx context.Context, fn func(Event)) error
	// LastRevision returns a revision at or past every write the store had
	// committed when it was called, for a read barrier: once a watch has
	// delivered it, it has delivered every write any watch could have
	// delivered, or any writer had seen acknowledged, before the call.
	LastRevision(ctx context.Context) (Revision, error)
}

// AsyncPutter is a store whose puts do not wait for the store's answer, so
// that a writer can keep many in flight (a replica's pipelined node writes).
type AsyncPutter interface {
	// PutAsync sends a put of key, under cond unless cond is NoCondition,
	// and calls done.PutDone once, from any goroutine, with the write's revision;
	// or with an error wrapping ErrRevisionMismatch when cond did not hold
	// as the store took it (nothing was stored), or wrapping
	// ErrUnavailable when it was not stored or its outcome is unknown.
	// Puts are stored in the order of the calls, never retried, and done
	// comes within a bounded time. PutAsync may block while too many puts
	// are in flight, until ctx ends. When it returns an error, nothing was
	// sent and done is not called. value is not retained once PutAsync has
	// returned.
	PutAsync(ctx context.Context, key string, value []byte, cond Condition, done PutReceiver) error
}

// PutReceiver is told the outcome of a put sent with PutAsync: the
// return leg of an asynchronous write, named so that a reader can follow
// it from the store to the writer.
type PutReceiver interface {
	// PutDone is called once per put, from any goroutine, as
	// AsyncPutter.PutAsync says. It must return quickly.
	PutDone(rev Revision, err error)
}

// PutFunc is a function that is a PutReceiver.
type PutFunc func(Revision, error)

// PutDone calls f.
func (f PutFunc) PutDone(rev Revision, err error) { f(rev, err) }

// Shared is a store that several processes use at once.
type Shared interface {
	Store
	Conditional
	Watcher
}

// String describes an event, for logs and test failures.
func (e Event) String() string {
	return fmt.Sprintf("%s %q @%s/%d exact=%t", e.Op, e.Key, e.Revision.Epoch, e.Revision.Seq, e.Exact)
}
