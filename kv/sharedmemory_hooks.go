package kv

import (
	"context"
	"fmt"
	"slices"
)

// The test hooks of SharedMemory: a store that is unavailable, that loses
// acknowledgements, whose watches stall, whose puts are held in flight.

// heldPut is a PutAsync in flight: sent, neither stored nor answered yet.
type heldPut struct {
	key      string
	value    []byte
	cond     Condition
	done     PutReceiver
	answered bool // ExpireHeldPuts answered it; storing it answers nothing
	stored   bool // StoreHeldPuts stored it: rev and err are its answer, still to give
	rev      Revision
	err      error
}

// SetUnavailable makes every call (reads, writes, Epoch, LastRevision)
// fail with an error wrapping ErrUnavailable while down is true, storing
// nothing, as a bucket without quorum does. Watches go on; they have
// nothing new to deliver.
func (s *SharedMemory) SetUnavailable(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// LoseAcks makes the next n writes succeed but return an error wrapping
// ErrUnavailable, as writes whose acknowledgement was lost: stored and
// delivered to watches, though the writer was told they failed.
func (s *SharedMemory) LoseAcks(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostAcks = n
}

// RefuseStoredWrites makes the next n conditional writes to key that meet
// their condition succeed but return an error wrapping
// ErrRevisionMismatch that names no last write, as a server that still
// takes itself for a replicated stream's leader refuses a put by its stale
// view while the new leader stores it: stored and delivered to watches,
// though the writer was told its condition failed.
func (s *SharedMemory) RefuseStoredWrites(key string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusedKey = key
	s.refusedStored = n
}

// RefusedStoredAt returns the sequence numbers at which the writes that
// RefuseStoredWrites answered as refused were stored, in order.
func (s *SharedMemory) RefusedStoredAt() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refusedAt)
}

// Available reports whether calls go through: false after
// SetUnavailable(true), until SetUnavailable(false).
func (s *SharedMemory) Available() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.down
}

// StallWatches holds every watch back: once it has returned, no watch
// delivers a write made (or starts over after a Clear made) after it,
// until ResumeWatches. An event a watch had already taken may still be
// delivered.
func (s *SharedMemory) StallWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = true
}

// ResumeWatches lets every watch go on from where it stopped: writes
// replaced while it was stalled are skipped, as a bucket does.
func (s *SharedMemory) ResumeWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = false
	s.notifyLocked()
}

// HoldPuts holds every PutAsync from now on, neither stored nor answered,
// as puts that wait in a stalled link, until ReleasePuts.
func (s *SharedMemory) HoldPuts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holding = true
}

// HeldPuts returns how many puts are held.
func (s *SharedMemory) HeldPuts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// ExpireHeldPuts answers the held puts not answered yet with an error
// wrapping ErrUnavailable, as a writer whose wait for them timed out, and
// keeps them held, for ReleasePuts to store, but holds no later put: a
// put sent after it is stored at once, before the held ones.
func (s *SharedMemory) ExpireHeldPuts() {
	s.mu.Lock()
	s.holding = false
	var expired []heldPut
	for i := range s.held {
		if !s.held[i].answered {
			s.held[i].answered = true
			expired = append(expired, s.held[i])
		}
	}
	s.mu.Unlock()
	for _, p := range expired {
		p.done.PutDone(Revision{}, fmt.Errorf("%w: put %s: no answer in time (ExpireHeldPuts)", ErrUnavailable, p.key))
	}
}

// ReleasePuts stops holding puts and stores those held, in the order they
// were sent, each under its condition as it holds now, answering those
// that ExpireHeldPuts did not (a put such an answer sends is not held).
func (s *SharedMemory) ReleasePuts(ctx context.Context) {
	s.mu.Lock()
	held := s.held
	s.held, s.holding = nil, false
	s.mu.Unlock()
	for _, p := range held {
		rev, err := p.rev, p.err
		if !p.stored {
			rev, err = s.putUnder(ctx, p.key, p.value, p.cond)
		}
		if !p.answered {
			p.done.PutDone(rev, err)
		}
	}
}

// StoreHeldPuts stores the held puts not stored yet, in the order they were
// sent, each under its condition as it holds now, and keeps holding them
// and their answers: as a link that delivers a worker's writes but stalls
// the store's answers to them. ReleasePuts gives the answers; puts sent
// meanwhile are held too.
func (s *SharedMemory) StoreHeldPuts(ctx context.Context) {
	s.mu.Lock()
	var todo []int
	for i := range s.held {
		if !s.held[i].stored {
			todo = append(todo, i)
		}
	}
	s.mu.Unlock()
	for _, i := range todo {
		s.mu.Lock()
		p := s.held[i]
		s.mu.Unlock()
		rev, err := s.putUnder(ctx, p.key, p.value, p.cond)
		s.mu.Lock()
		s.held[i].stored, s.held[i].rev, s.held[i].err = true, rev, err
		s.mu.Unlock()
	}
}

// ForgetAfter makes the store forget every write after seq, as a bucket
// whose servers were restored from an older copy of their stores does,
// without starting a new epoch: the keys last written after seq are gone
// (this store keeps no older value of a key) and sequence numbers go on
// from seq. A watch past seq sees nothing until the sequence passes where
// it was, as a bucket's consumer does.
func (s *SharedMemory) ForgetAfter(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq >= s.seq {
		return
	}
	for key, e := range s.entries {
		if e.seq > seq {
			delete(s.entries, key)
		}
	}
	s.order = slices.DeleteFunc(s.order, func(w sharedWrite) bool { return w.seq > seq })
	s.seq = seq
	s.notifyLocked()
}
