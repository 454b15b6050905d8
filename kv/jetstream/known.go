package jetstream

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/flowstate-io/flowstate/kv"
)

// What a store knows its stream held. A stream never holds two writes at
// one sequence number, so a stream that delivers, at a sequence number at
// which it acknowledged one of this store's puts or delivered a write to
// its watch, another write than that one, in the same epoch, forgot it; so
// does one that numbers a write this store sends afterwards (a put, a read
// barrier) at or below such a sequence number: that write is not
// acknowledged in the epoch, and the watch starts a new one before it
// applies anything else.
// Unlike the watch's mark (forgotten.go), this tells a store that forgot
// whether or not the watch ever delivered what was lost (a watch that
// lagged, or that is slow to come back), and whether or not the stream has
// been written past the mark since: writes past it are how a store that
// forgot hides it, as a key's later write drops its earlier one.

// maxKnownWrites bounds the writes a store remembers, the latest ones (a
// power of two): a lost tail longer than that is still found when the
// watch starts over, by a read barrier numbered at or below the highest
// (knownWrites.topOf), or once the stream is written up to the ones kept.
const maxKnownWrites = 1 << 13

// knownWrites is what a store knows its stream held in one epoch: a hash
// of each write's subject and data, in a table by sequence number modulo
// maxKnownWrites that keeps the later of two writes. Its methods are safe
// for concurrent use (the watch's goroutine and the acknowledgements').
type knownWrites struct {
	seed maphash.Seed
	lost atomic.Bool // numbered found a lost write the watch has not taken (takeLost)

	// The epoch recorded and its highest sequence number, read without mu
	// by every write sent (topOf); changed under mu.
	cur atomic.Pointer[knownTop]

	mu       sync.Mutex
	writes   []knownWrite
	lostWhy  string // what numbered found, in epoch
	lostFrom string // the epoch it was found in
}

type knownTop struct {
	epoch string
	top   atomic.Uint64 // the highest sequence number recorded in epoch
}

type knownWrite struct {
	seq  uint64 // 0: none
	hash uint64
}

func newKnownWrites() *knownWrites {
	return &knownWrites{seed: maphash.MakeSeed(), writes: make([]knownWrite, maxKnownWrites)}
}

// hash is the hash of a write of data on subject.
func (k *knownWrites) hash(subject string, data []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(k.seed)
	_, _ = h.WriteString(subject)
	_ = h.WriteByte(0)
	_, _ = h.Write(data)
	return h.Sum64()
}

// note records that the stream held the write of hash h at seq in epoch,
// and reports whether it had recorded another write there in that epoch
// (which it keeps). A new epoch starts the record over.
func (k *knownWrites) note(epoch string, seq, h uint64) (other bool) {
	if epoch == "" || seq == 0 {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	cur := k.cur.Load()
	if cur == nil || epoch != cur.epoch {
		cur = &knownTop{epoch: epoch}
		k.cur.Store(cur)
		clear(k.writes)
	}
	w := &k.writes[seq&(maxKnownWrites-1)]
	switch {
	case w.seq == seq:
		return w.hash != h
	case w.seq < seq:
		*w = knownWrite{seq: seq, hash: h}
		if seq > cur.top.Load() {
			cur.top.Store(seq) // under mu: no other writer
		}
	}
	return false
}

// topOf is the highest sequence number recorded in epoch; 0 if none.
func (k *knownWrites) topOf(epoch string) uint64 {
	if cur := k.cur.Load(); cur != nil && cur.epoch == epoch {
		return cur.top.Load()
	}
	return 0
}

// numbered returns an error wrapping kv.ErrUnavailable if seq, the
// sequence number the stream gave a write this store sent once top was the
// highest it had recorded in epoch (topOf), is at or below top: a stream
// numbers every write after those it had numbered, so it forgot the one at
// top. what and name say which write it was. The watch then starts a new
// epoch (takeLost) before it applies another write.
func (k *knownWrites) numbered(epoch string, top, seq uint64, what, name string) error {
	if top == 0 || seq > top {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if cur := k.cur.Load(); cur == nil || cur.epoch != epoch {
		return nil
	}
	k.lostWhy, k.lostFrom = fmt.Sprintf("the stream numbers %s%s %d, at or below revision %d that it acknowledged or delivered to this worker", what, name, seq, top), epoch
	k.lost.Store(true)
	return fmt.Errorf("%w: %s: it forgot that one", kv.ErrUnavailable, k.lostWhy)
}

// takeLost returns what numbered found since the last call, if it was
// found in epoch; "" if nothing.
func (k *knownWrites) takeLost(epoch string) string {
	if !k.lost.Load() {
		return ""
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lost.Store(false)
	if k.lostFrom != epoch {
		return ""
	}
	return k.lostWhy
}

// startOverLost returns errStartOver, once a new epoch is started, if a
// write this store sent in epoch was numbered at or below a revision it
// had recorded (numbered); nil if not.
func (s *Store) startOverLost(ctx context.Context, epoch string) error {
	why := s.known.takeLost(epoch)
	if why == "" {
		return nil
	}
	return s.startOver(ctx, epoch, why)
}

// startOverOverwritten returns errStartOver, once a new epoch is started,
// if the stream holds, at seq, another write than the one (of hash h) it
// acknowledged or delivered to this store there in epoch; nil if not, and
// it records the write then.
func (s *Store) startOverOverwritten(ctx context.Context, epoch string, seq, h uint64) error {
	if !s.known.note(epoch, seq, h) {
		return nil
	}
	return s.startOver(ctx, epoch, fmt.Sprintf("the stream holds another write at revision %d than the one it acknowledged or delivered to this worker", seq))
}

// startOverBelowKnown returns errStartOver, once a new epoch is started, if
// the stream numbers a read barrier at or below the highest write it
// acknowledged or delivered to this store in epoch (numbered): it forgot
// that one. Nil if not, or if it cannot tell now (JetStream takes no
// write): the watch's deliveries still tell (startOverOverwritten).
func (s *Store) startOverBelowKnown(ctx context.Context, epoch string) error {
	if s.known.topOf(epoch) == 0 {
		return nil
	}
	_, _ = s.LastRevision(ctx) // a barrier numbered at or below is one numbered tells
	return s.startOverLost(ctx, epoch)
}
