package traineragent

import "sync"

// recordedShards says which shards a reader's recorded position has
// complete (or owed: lag.go), the test for settling a shard's task: the
// epochs it has finished, the shards reported by writes since the
// position was loaded (or rewound), and the position loaded. The notes of
// finished epochs are dropped, so it holds the open epochs' only.
type recordedShards struct {
	mu       sync.Mutex // a leaf (see Reader): taken under positionStore.mu, never Reader.mu
	shards   map[shardRef]bool
	finished int
	base     *assembler // the position loaded (or rewound to); nil: none
}

// has reports whether s is complete (or owed) in the recorded position.
func (r *recordedShards) has(s shardRef) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.epoch < r.finished || r.shards[s] ||
		r.base != nil && (r.base.shardComplete(s.epoch, s.shard) || r.base.owes(s.epoch, s.shard))
}

// add notes shards a write recorded complete, and the epochs it has finished.
func (r *recordedShards) add(shards []shardRef, finished int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shards == nil {
		r.shards = map[shardRef]bool{}
	}
	for _, s := range shards {
		r.shards[s] = true
	}
	if finished > r.finished {
		r.finished = finished
		for s := range r.shards {
			if s.epoch < finished {
				delete(r.shards, s)
			}
		}
	}
}

// reset starts the notes from base, a position restored (nil: none): a
// load, or a resume's rewind, after which shards complete before may be
// owed again.
func (r *recordedShards) reset(base *assembler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shards, r.base, r.finished = map[shardRef]bool{}, base, 0
	if base != nil {
		r.finished = base.finished
	}
}
