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

type memEntry struct {
	value []byte
	rev   uint64
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
	return Entry{Key: key, Value: clone(e.value), Revision: e.rev}, nil
}

// Put implements Store. Overwriting a key reuses its buffer when the new value
// fits, so a steady stream of same-sized writes does not allocate.
func (m *Memory) Put(_ context.Context, key string, value []byte) (Revision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	if e, ok := m.entries[key]; ok {
		e.value = append(e.value[:0], value...)
		e.rev = m.seq
	} else {
		m.entries[key] = &memEntry{value: clone(value), rev: m.seq}
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
			out = append(out, Entry{Key: k, Value: clone(e.value), Revision: e.rev})
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
		out[k] = clone(e.value)
	}
	return out
}

func clone(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}
