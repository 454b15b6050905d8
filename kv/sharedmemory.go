package kv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// errDown is why a SharedMemory refuses calls while SetUnavailable(true).
var errDown = errors.New("made unavailable by SetUnavailable")

// SharedMemoryOptions configures a SharedMemory. The zero value is ready to
// use.
type SharedMemoryOptions struct {
	// Now is the store's clock, which stamps Event.Time; time.Now if nil.
	Now func() time.Time
	// MaxValue, if positive, is the largest value the store takes, as a
	// NATS server's max payload: a larger write fails with ErrTooLarge.
	MaxValue int
}

// SharedMemory is a Shared store held in process memory: what a NATS
// JetStream key-value bucket (package kv/jetstream) offers several
// processes, in one process, so that the code that shares a store (a
// replica, a lease) can be tested deterministically without a server.
//
// It behaves as a bucket that keeps one value per key: each key's last
// write, a deletion included, is kept with its sequence number, so a
// Condition on a deleted key holds on the deletion's revision, and a watch
// that falls behind skips the writes that later ones replaced (Event.Exact
// is false until it has caught up). Sequence numbers keep growing across a
// Clear, which starts a new epoch and makes every watch start over with
// OpReset.
//
// Test hooks: SetUnavailable makes every call fail with ErrUnavailable,
// LoseAcks stores writes but answers them with ErrUnavailable,
// StallWatches holds every watch back until ResumeWatches, and HoldPuts
// keeps PutAsync's puts in flight (held in a stalled link) until
// ReleasePuts, ExpireHeldPuts answering them meanwhile as timed out.
type SharedMemory struct {
	now      func() time.Time
	maxValue int

	mu      sync.Mutex              // guards every field below
	entries map[string]*sharedEntry // each key's last write, deletions included
	// order lists writes in sequence order; an item whose key has been
	// written again since is stale, and dropped by compactLocked.
	order         []sharedWrite
	seq           uint64 // sequence number of the last write
	epoch         string
	down          bool
	lostAcks      int // writes still to be stored but answered with ErrUnavailable
	refusedStored int // conditional writes to refusedKey still to be stored but answered as refused
	refusedKey    string
	refusedAt     []uint64 // the sequence numbers of those stored so far
	stalled       bool
	changed       chan struct{} // closed, and replaced, when watches have something new to see
	holding       bool          // PutAsync holds its puts (HoldPuts)
	held          []heldPut     // the puts held, in the order they were sent
}

type sharedEntry struct {
	value   []byte // nil if deleted
	seq     uint64
	deleted bool
	time    time.Time
}

type sharedWrite struct {
	seq uint64
	key string
}

var (
	_ Shared      = (*SharedMemory)(nil)
	_ AsyncPutter = (*SharedMemory)(nil)
)

// NewSharedMemory returns an empty shared store with a new epoch.
func NewSharedMemory(opts SharedMemoryOptions) *SharedMemory {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &SharedMemory{
		now:      opts.Now,
		maxValue: opts.MaxValue,
		entries:  make(map[string]*sharedEntry),
		epoch:    NewEpoch(),
		changed:  make(chan struct{}),
	}
}

func (s *SharedMemory) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *SharedMemory) availableLocked(what string) error {
	if s.down {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, errDown)
	}
	return nil
}

// Get implements Store.
func (s *SharedMemory) Get(_ context.Context, key string) (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.availableLocked("get " + key); err != nil {
		return Entry{}, err
	}
	e, ok := s.entries[key]
	if !ok || e.deleted {
		return Entry{}, ErrNotFound
	}
	return Entry{Key: key, Value: clone(e.value), Revision: e.seq}, nil
}

// Put implements Store.
func (s *SharedMemory) Put(_ context.Context, key string, value []byte) (Revision, error) {
	return s.write("put", key, value, false, nil)
}

// PutAsync implements AsyncPutter: it is Put (PutIf under cond), answered
// by done before it returns, unless HoldPuts holds it.
func (s *SharedMemory) PutAsync(ctx context.Context, key string, value []byte, cond Condition, done PutReceiver) error {
	s.mu.Lock()
	if s.holding {
		s.held = append(s.held, heldPut{key: key, value: clone(value), cond: cond, done: done})
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	done.PutDone(s.putUnder(ctx, key, value, cond))
	return nil
}

// putUnder is Put, or PutIf under cond unless cond is NoCondition.
func (s *SharedMemory) putUnder(ctx context.Context, key string, value []byte, cond Condition) (Revision, error) {
	if cond == NoCondition {
		return s.Put(ctx, key, value)
	}
	return s.PutIf(ctx, key, value, cond)
}

// Delete implements Store. Deleting a missing key writes a deletion too.
func (s *SharedMemory) Delete(_ context.Context, key string) (Revision, error) {
	return s.write("delete", key, nil, true, nil)
}

// PutIf implements Conditional.
func (s *SharedMemory) PutIf(_ context.Context, key string, value []byte, cond Condition) (Revision, error) {
	return s.write("put", key, value, false, &cond)
}

// DeleteIf implements Conditional.
func (s *SharedMemory) DeleteIf(_ context.Context, key string, cond Condition) (Revision, error) {
	return s.write("delete", key, nil, true, &cond)
}

func (s *SharedMemory) write(op, key string, value []byte, del bool, cond *Condition) (Revision, error) {
	what := op + " " + key
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.availableLocked(what); err != nil {
		return Revision{}, err
	}
	if s.maxValue > 0 && len(value) > s.maxValue {
		return Revision{}, fmt.Errorf("%w: %s: %d bytes, past %d", ErrTooLarge, what, len(value), s.maxValue)
	}
	if cond != nil {
		var last uint64
		if e, ok := s.entries[cond.Key]; ok {
			last = e.seq
		}
		if last != cond.Revision {
			return Revision{}, &MismatchError{Last: last, Err: fmt.Errorf("%w: %s: the last write of %s is %d, not %d",
				ErrRevisionMismatch, what, cond.Key, last, cond.Revision)}
		}
	}
	s.seq++
	e := &sharedEntry{seq: s.seq, deleted: del, time: s.now()}
	if !del {
		e.value = clone(value)
	}
	s.entries[key] = e
	s.order = append(s.order, sharedWrite{seq: s.seq, key: key})
	s.compactLocked()
	s.notifyLocked()
	if cond != nil && s.refusedStored > 0 && key == s.refusedKey {
		s.refusedStored--
		s.refusedAt = append(s.refusedAt, s.seq)
		return Revision{}, fmt.Errorf("%w: %s: stored as %d, but answered as refused (RefuseStoredWrites)", ErrRevisionMismatch, what, s.seq)
	}
	if s.lostAcks > 0 {
		s.lostAcks--
		return Revision{}, fmt.Errorf("%w: %s: stored as %d, but the acknowledgement was lost (LoseAcks)", ErrUnavailable, what, s.seq)
	}
	return Revision{Epoch: s.epoch, Seq: s.seq}, nil
}

// compactLocked drops stale items from order once they outnumber the keys,
// so that order stays within twice the number of keys.
func (s *SharedMemory) compactLocked() {
	if len(s.order) <= 2*len(s.entries)+64 {
		return
	}
	s.order = slices.DeleteFunc(s.order, func(w sharedWrite) bool { return s.entries[w.key].seq != w.seq })
}

// Clear wipes the store, as an operator who purges a bucket does: it
// removes every key, deletions included, and starts a new epoch; every
// watch starts over. Sequence numbers keep growing.
func (s *SharedMemory) Clear(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.availableLocked("clear"); err != nil {
		return err
	}
	s.entries = make(map[string]*sharedEntry)
	s.order = nil
	s.epoch = NewEpoch()
	s.notifyLocked()
	return nil
}

// Epoch implements Store.
func (s *SharedMemory) Epoch(context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.availableLocked("epoch"); err != nil {
		return "", err
	}
	return s.epoch, nil
}

// LastRevision implements Watcher.
func (s *SharedMemory) LastRevision(context.Context) (Revision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.availableLocked("last revision"); err != nil {
		return Revision{}, err
	}
	return Revision{Epoch: s.epoch, Seq: s.seq}, nil
}

// Watch implements Watcher. It returns only when ctx ends.
func (s *SharedMemory) Watch(ctx context.Context, fn func(Event)) error {
	for {
		if err := s.watchPass(ctx, fn); err != nil {
			return err
		}
	}
}

// watchPass delivers OpReset, the current entries, OpSynced and then live
// writes, until the epoch changes (nil) or ctx ends (its error).
func (s *SharedMemory) watchPass(ctx context.Context, fn func(Event)) error {
	s.mu.Lock()
	for s.stalled {
		if err := s.waitLocked(ctx); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	epoch, last := s.epoch, s.seq
	var current []Event
	for _, w := range s.order {
		if e := s.entries[w.key]; e.seq == w.seq {
			ev := Event{Op: OpPut, Key: w.key, Value: clone(e.value), Revision: Revision{Epoch: epoch, Seq: w.seq}, Time: e.time}
			if e.deleted {
				ev.Op, ev.Value = OpDelete, nil
			}
			current = append(current, ev)
		}
	}
	s.mu.Unlock()

	fn(Event{Op: OpReset, Revision: Revision{Epoch: epoch}})
	for _, ev := range current {
		fn(ev)
	}
	fn(Event{Op: OpSynced, Revision: Revision{Epoch: epoch, Seq: last}, Exact: true})
	exact := true
	for {
		ev, ok, err := s.next(ctx, epoch, last, exact)
		if err != nil || !ok {
			return err
		}
		last, exact = ev.Revision.Seq, ev.Exact
		fn(ev)
	}
}

// next waits for the first write after last in epoch and returns it; ok is
// false when the epoch has changed.
func (s *SharedMemory) next(ctx context.Context, epoch string, last uint64, exact bool) (ev Event, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if !s.stalled {
			if s.epoch != epoch {
				return Event{}, false, nil
			}
			i, _ := slices.BinarySearchFunc(s.order, last+1, func(w sharedWrite, seq uint64) int { return cmp.Compare(w.seq, seq) })
			for ; i < len(s.order); i++ {
				w := s.order[i]
				e := s.entries[w.key]
				if e.seq != w.seq {
					continue // replaced by a later write
				}
				ev := Event{Op: OpPut, Key: w.key, Value: clone(e.value), Revision: Revision{Epoch: epoch, Seq: w.seq},
					Time: e.time, Exact: (exact && w.seq == last+1) || w.seq == s.seq}
				if e.deleted {
					ev.Op, ev.Value = OpDelete, nil
				}
				return ev, true, nil
			}
		}
		if err := s.waitLocked(ctx); err != nil {
			return Event{}, false, err
		}
	}
}

// waitLocked waits, without the lock, until something changes or ctx ends.
func (s *SharedMemory) waitLocked(ctx context.Context) error {
	changed := s.changed
	s.mu.Unlock()
	defer s.mu.Lock()
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func clone(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}
