package kv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"strings"
	"sync"
)

// Memory is a Store held in process memory, like the seed's MemoryKvBackend.
// Its epoch is random, so a new Memory (a restarted process) never shares an
// epoch with an earlier one.
type Memory struct {
	mu      sync.RWMutex // guards entries, seq and epoch
	entries map[string]*memEntry
	seq     uint64
	epoch   string
}

// memEntry is one key: its bytes, or a value rendered when read (PutLazy).
type memEntry struct {
	value []byte
	lazy  Renderer // renders the value when set; value is unused then
	rev   uint64
}

// bytes returns a copy of the entry's value, the caller's to keep. It is
// called under the store's lock, read or write.
func (e *memEntry) bytes() []byte {
	if e.lazy != nil {
		return e.lazy.AppendValue(nil)
	}
	return clone(e.value)
}

// Renderer is a value that a Memory keeps as it is given and renders to
// bytes only when the key is read (PutLazy): the value of a key written far
// more often than it is read costs nothing to write.
type Renderer interface {
	// AppendValue appends the value's bytes to dst and returns the result.
	// The same Renderer must always render the same bytes while a store
	// holds it. Readers of the store may call it at the same time, each
	// with its own dst, so it must only read the value.
	AppendValue(dst []byte) []byte
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store with a new epoch.
func NewMemory() *Memory {
	return &Memory{entries: make(map[string]*memEntry), epoch: NewEpoch()}
}

// NewEpoch returns a new epoch: 16 random hex digits, so that a store that
// starts over never shares an epoch with an earlier one.
func NewEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, key string) (Entry, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.entries[key]
	if !ok {
		return Entry{}, ErrNotFound
	}
	return Entry{Key: key, Value: e.bytes(), Revision: e.rev}, nil
}

// Put implements Store. Overwriting a key reuses its buffer when the new value
// fits, so a steady stream of same-sized writes does not allocate.
func (m *Memory) Put(_ context.Context, key string, value []byte) (Revision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	if e, ok := m.entries[key]; ok {
		e.value = append(e.value[:0], value...)
		e.lazy = nil
		e.rev = m.seq
	} else {
		m.entries[key] = &memEntry{value: clone(value), rev: m.seq}
	}
	return Revision{Epoch: m.epoch, Seq: m.seq}, nil
}

// PutLazy is Put of the bytes that v renders, rendered only when the key is
// read (Get, Range, Dump): each read renders them again, under the store's
// read lock, on the reader's goroutine, so a large value read often holds
// writers back for its rendering. Readers see exactly what Put of those
// bytes would have shown.
//
// The store holds v until the key is written again, deleted or cleared,
// and the caller must not change what v renders until then: a caller that
// updates a key's value in place keeps two Renderers and writes the one
// that the store does not hold. Once a later write of the key, or a Clear,
// has returned, the store no longer touches v. PutLazy does not allocate
// when it overwrites a key.
func (m *Memory) PutLazy(_ context.Context, key string, v Renderer) (Revision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	if e, ok := m.entries[key]; ok {
		e.value = nil // a key written lazily is rarely written plainly again
		e.lazy = v
		e.rev = m.seq
	} else {
		m.entries[key] = &memEntry{lazy: v, rev: m.seq}
	}
	return Revision{Epoch: m.epoch, Seq: m.seq}, nil
}

// Range implements Store.
func (m *Memory) Range(_ context.Context, prefix string) ([]Entry, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []Entry
	for k, e := range m.entries {
		if strings.HasPrefix(k, prefix) {
			out = append(out, Entry{Key: k, Value: e.bytes(), Revision: e.rev})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, key string) (Revision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	delete(m.entries, key)
	return Revision{Epoch: m.epoch, Seq: m.seq}, nil
}

// Clear implements Store: it removes every key and starts a new epoch, as a
// metasrv leader change resets the seed's in-memory KV. Sequence numbers keep
// growing across a Clear.
func (m *Memory) Clear(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries = make(map[string]*memEntry)
	m.epoch = NewEpoch()
	return nil
}

// Epoch implements Store.
func (m *Memory) Epoch(context.Context) (string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.epoch, nil
}

// Dump returns a copy of every key and value, for tests and debugging.
func (m *Memory) Dump() map[string][]byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string][]byte, len(m.entries))
	for k, e := range m.entries {
		out[k] = e.bytes()
	}
	return out
}

func clone(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}
