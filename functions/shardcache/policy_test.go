package shardcache

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAdmit(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	const horizon = 10 * time.Minute
	tests := []struct {
		name      string
		entries   []Entry
		need      int64
		budget    int64
		wantEvict []string
		wantOK    bool
	}{
		{name: "room", entries: []Entry{{Name: "a", Size: 40, LastUse: ago(time.Hour)}}, need: 60, budget: 100, wantOK: true},
		{name: "larger than the budget", need: 101, budget: 100},
		{name: "empty budget", need: 1, budget: 0},
		{
			name: "full of hot entries: bypass, keep the stable set",
			entries: []Entry{
				{Name: "a", Size: 50, LastUse: ago(time.Second)},
				{Name: "b", Size: 50, LastUse: ago(9 * time.Minute)},
			},
			need: 10, budget: 100,
		},
		{
			name: "cold entries go, least recently used first, only as many as needed",
			entries: []Entry{
				{Name: "hot", Size: 30, LastUse: ago(time.Minute)},
				{Name: "cold-new", Size: 30, LastUse: ago(20 * time.Minute)},
				{Name: "cold-old", Size: 30, LastUse: ago(2 * time.Hour)},
			},
			need: 30, budget: 100, wantEvict: []string{"cold-old"}, wantOK: true,
		},
		{
			name: "every cold entry is not enough: evict nothing",
			entries: []Entry{
				{Name: "hot", Size: 60, LastUse: ago(time.Minute)},
				{Name: "cold", Size: 30, LastUse: ago(time.Hour)},
			},
			need: 50, budget: 100,
		},
		{
			name: "pinned entries stay however old",
			entries: []Entry{
				{Name: "writing", Size: 50, LastUse: ago(time.Hour), Pinned: true},
				{Name: "cold", Size: 50, LastUse: ago(time.Hour)},
			},
			need: 60, budget: 100,
		},
		{
			name:    "exactly at the horizon is still hot",
			entries: []Entry{{Name: "edge", Size: 100, LastUse: ago(horizon)}},
			need:    1, budget: 100,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evict, ok := Admit(tt.entries, tt.need, tt.budget, now, horizon)
			if ok != tt.wantOK {
				t.Errorf("ok = %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.wantEvict, evict); diff != "" {
				t.Errorf("evicted (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestAdmitEpochs replays three epochs of shuffled reads of 10 shards
// through a cache that holds 4: Admit keeps a stable set and hits 4 of 10
// reads in every later epoch, where LRU would hit almost none.
func TestAdmitEpochs(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	clock := reuseClock{fallback: time.Minute}
	cached := map[string]*Entry{}
	orders := [][]int{{3, 7, 1, 9, 0, 4, 8, 2, 6, 5}, {5, 0, 2, 8, 7, 1, 3, 6, 9, 4}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}}
	var hitsPerEpoch []int
	for _, order := range orders {
		hits := 0
		for _, shard := range order {
			now = now.Add(time.Second)
			name := string(rune('a' + shard))
			if e, ok := cached[name]; ok {
				hits++
				clock.hit(e.LastUse, now)
				e.LastUse = now
				continue
			}
			var entries []Entry
			for _, e := range cached {
				entries = append(entries, *e)
			}
			evict, ok := Admit(entries, 10, 40, now, clock.horizon())
			for _, n := range evict {
				delete(cached, n)
			}
			if ok {
				cached[name] = &Entry{Name: name, Size: 10, LastUse: now}
			}
		}
		hitsPerEpoch = append(hitsPerEpoch, hits)
	}
	if diff := cmp.Diff([]int{0, 4, 4}, hitsPerEpoch); diff != "" {
		t.Errorf("hits per epoch (-want,+got):\n%s", diff)
	}
	// Once the job stops, its entries go cold after the horizon.
	later := now.Add(clock.horizon() + time.Second)
	var entries []Entry
	for _, e := range cached {
		entries = append(entries, *e)
	}
	if _, ok := Admit(entries, 10, 40, later, clock.horizon()); !ok {
		t.Errorf("a new dataset's shard was not admitted %v after the old one was last read (horizon %v)", later.Sub(now), clock.horizon())
	}
}

func TestReuseClock(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	c := reuseClock{fallback: time.Hour}
	if got := c.horizon(); got != time.Hour {
		t.Errorf("horizon before any reuse = %v, want the fallback 1h", got)
	}
	c.hit(now.Add(-30*time.Second), now)
	if got := c.horizon(); got != time.Hour {
		t.Errorf("horizon = %v, want the fallback 1h over 2 x the longest reuse (30s)", got)
	}
	c.hit(now.Add(-50*time.Minute), now)
	c.hit(now.Add(-10*time.Second), now)
	if got := c.horizon(); got != 100*time.Minute {
		t.Errorf("horizon = %v, want 2 x the longest reuse (50m) = 1h40m", got)
	}
}
