package shardcache

import (
	"slices"
	"time"
)

// Entry is what the eviction policy knows of one cached shard.
type Entry struct {
	Name    string
	Size    int64
	LastUse time.Time
	// Pinned entries count against the budget but cannot be evicted: an
	// entry being written (a temporary file) or being read.
	Pinned bool
}

// Admit decides whether a shard of need bytes may enter a tier that holds
// entries within budget, and which entries to evict to make room. Only
// entries idle for longer than horizon are evicted, least recently used
// first; when evicting all of them would not make room, nothing is evicted
// and ok is false: the shard is read without being cached (see the package
// documentation for why).
func Admit(entries []Entry, need, budget int64, now time.Time, horizon time.Duration) (evict []string, ok bool) {
	if need > budget || need < 0 {
		return nil, false
	}
	var used int64
	for _, e := range entries {
		used += e.Size
	}
	free := budget - used
	if need <= free {
		return nil, true
	}
	var cold []Entry
	for _, e := range entries {
		if !e.Pinned && now.Sub(e.LastUse) > horizon {
			cold = append(cold, e)
		}
	}
	slices.SortFunc(cold, func(a, b Entry) int { return a.LastUse.Compare(b.LastUse) })
	for _, e := range cold {
		evict = append(evict, e.Name)
		if free += e.Size; need <= free {
			return evict, true
		}
	}
	return nil, false
}

// reuseClock estimates the reuse horizon from the hits a tier sees: an
// entry hit again after an interval says the data is read at least that
// often. It is not safe for concurrent use.
type reuseClock struct {
	longest  time.Duration // longest reuse interval seen
	fallback time.Duration // before any reuse is seen
}

// hit records that an entry last used at lastUse was used again at now.
func (r *reuseClock) hit(lastUse, now time.Time) {
	r.longest = max(r.longest, now.Sub(lastUse))
}

// horizon is how long an entry may go unused before it is cold: twice the
// longest reuse seen (a shard comes back within at most two epochs: read
// first in one, last in the next), and never less than the fallback. The
// reuse seen early in an epoch understates the epoch's length (only the
// shards read again so far count), so the fallback is a floor, not just a
// start: a running job's entries are never taken for cold.
func (r *reuseClock) horizon() time.Duration {
	return max(r.fallback, 2*r.longest)
}
