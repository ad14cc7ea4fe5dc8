package assembly

import "sync"

// RecordedShards says which shards a reader's recorded position has
// complete (or owed: lag.go), the test for settling a shard's task: the
// epochs it has finished, the shards reported by writes since the
// position was loaded (or rewound), and the position loaded. The notes of
// finished epochs are dropped, so it holds the open epochs' only.
type RecordedShards struct {
	mu       sync.Mutex // a leaf (see Reader): taken under positionStore.mu, never Reader.mu
	shards   map[ShardRef]bool
	finished int
	base     *Assembler // the position loaded (or rewound to); nil: none
}

// Has reports whether s is complete (or owed) in the recorded position.
func (r *RecordedShards) Has(s ShardRef) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.Epoch < r.finished || r.shards[s] ||
		r.base != nil && (r.base.ShardComplete(s.Epoch, s.Shard) || r.base.Owes(s.Epoch, s.Shard))
}

// Add notes shards a write recorded complete, and the epochs it has finished.
func (r *RecordedShards) Add(shards []ShardRef, finished int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shards == nil {
		r.shards = map[ShardRef]bool{}
	}
	for _, s := range shards {
		r.shards[s] = true
	}
	if finished > r.finished {
		r.finished = finished
		for s := range r.shards {
			if s.Epoch < finished {
				delete(r.shards, s)
			}
		}
	}
}

// Reset starts the notes from base, a position restored (nil: none): a
// load, or a resume's rewind, after which shards complete before may be
// owed again.
func (r *RecordedShards) Reset(base *Assembler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shards, r.base, r.finished = map[ShardRef]bool{}, base, 0
	if base != nil {
		r.finished = base.Finished
	}
}
