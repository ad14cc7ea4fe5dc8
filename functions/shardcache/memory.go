package shardcache

import (
	"sync"
	"time"
)

// memTier keeps whole shards in this process's memory within a budget,
// under the same policy as the disk. A served slice stays valid after its
// entry is evicted (the garbage collector frees it once the read ends), so
// entries need no pins; a reservation holds room for a shard being read.
type memTier struct {
	budget int64

	mu       sync.Mutex
	reuse    reuseClock
	entries  map[string]*memEntry
	reserved int64
}

type memEntry struct {
	etag    string
	data    []byte
	lastUse time.Time
}

func newMemTier(budget int64, fallback time.Duration) *memTier {
	return &memTier{budget: budget, reuse: reuseClock{fallback: fallback}, entries: map[string]*memEntry{}}
}

// get returns name's entry and records the use when it is there.
func (m *memTier) get(name string) (etag string, data []byte, lastUse time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[name]
	if !ok {
		return "", nil, time.Time{}, false
	}
	return e.etag, e.data, e.lastUse, true
}

// touch records a hit.
func (m *memTier) touch(name string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[name]; ok {
		m.reuse.hit(e.lastUse, now)
		e.lastUse = now
	}
}

func (m *memTier) remove(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, name)
}

// reserve makes room for need bytes if the policy allows; the returned
// release gives the room back unless put used it.
func (m *memTier) reserve(need int64, now time.Time) (ok bool, evicted int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	entries := make([]Entry, 0, len(m.entries)+1)
	for n, e := range m.entries {
		entries = append(entries, Entry{Name: n, Size: int64(len(e.data)), LastUse: e.lastUse})
	}
	if m.reserved > 0 {
		entries = append(entries, Entry{Name: "", Size: m.reserved, Pinned: true})
	}
	evict, ok := Admit(entries, need, m.budget, now, m.reuse.horizon())
	for _, n := range evict {
		delete(m.entries, n)
	}
	if ok {
		m.reserved += need
	}
	return ok, len(evict)
}

// put turns a reservation of len(data) bytes into an entry, or, with data
// nil, gives back a reservation of size bytes.
func (m *memTier) put(name, etag string, size int64, data []byte, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reserved -= size
	if data != nil {
		m.entries[name] = &memEntry{etag: etag, data: data, lastUse: now}
	}
}
