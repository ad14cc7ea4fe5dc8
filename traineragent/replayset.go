package traineragent

import "fmt"

// replaySet returns, per epoch, the shards that must be produced again for
// a reader to resume at position p when its memory holds h (h is at or
// past p): those not complete in p of which h has a chunk handed out in
// full beyond p, or that h has complete (its task may be settled), or that
// an earlier resume replayed, or that a lagging reader owes (did not
// keep). What was handed out is no longer in memory; chunks still held,
// rows of them handed out and shard ends are carried over by the rewind
// (carry). Producing a shard once too often costs only time (copies are
// dropped by ChunkRef). Epochs before p.Finished are left out. It is pure:
// the agent calls it on its snapshot.
func replaySet(h, p position, epochs, shards int) (map[int][]int, error) {
	out := map[int][]int{}
	for e := max(p.Finished, 0); e < epochs; e++ {
		pe := p.Epochs[e]
		pComplete, err := decodeSet(pe.Complete, shards)
		if err != nil {
			return nil, fmt.Errorf("resume position: epoch %d: complete shards: %w", e, err)
		}
		if e < h.Finished {
			for s := range shards {
				if !pComplete.has(s) {
					out[e] = append(out[e], s)
				}
			}
			continue
		}
		he, ok := h.Epochs[e]
		if !ok {
			continue
		}
		hComplete, err := decodeSet(he.Complete, shards)
		if err != nil {
			return nil, fmt.Errorf("recorded position: epoch %d: complete shards: %w", e, err)
		}
		hReplayed, err := decodeSet(he.Replayed, shards)
		if err != nil {
			return nil, fmt.Errorf("recorded position: epoch %d: replayed shards: %w", e, err)
		}
		hOwed, err := decodeSet(he.Owed, shards)
		if err != nil {
			return nil, fmt.Errorf("recorded position: epoch %d: owed shards: %w", e, err)
		}
		for s := range shards {
			if pComplete.has(s) {
				continue
			}
			more := hComplete.has(s) || hReplayed.has(s) || hOwed.has(s)
			if !more {
				if hs, ok := he.Shards[s]; ok {
					if more, err = ackedMore(hs, pe.Shards[s]); err != nil {
						return nil, fmt.Errorf("epoch %d: shard %d: %w", e, s, err)
					}
				}
			}
			if more {
				out[e] = append(out[e], s)
			}
		}
	}
	for e, s := range out {
		if len(s) == 0 {
			delete(out, e)
		}
	}
	return out, nil
}

// ackedMore reports whether h has rows of a shard handed out that p has
// not (some may still be held, and carried: producing the shard again
// costs only time), or, in format 1, a chunk handed out in full.
func ackedMore(h, p shardPosition) (bool, error) {
	hr, err := decodeSet(h.Handed, maxRowsPerShard)
	if err != nil {
		return false, fmt.Errorf("recorded rows: %w", err)
	}
	pr, err := decodeSet(p.Handed, maxRowsPerShard)
	if err != nil {
		return false, fmt.Errorf("resume rows: %w", err)
	}
	for i, w := range hr {
		if i < len(pr) {
			w &^= pr[i]
		}
		if w != 0 {
			return true, nil
		}
	}
	hc, err := decodeSet(h.Chunks, maxChunksPerShard)
	if err != nil {
		return false, fmt.Errorf("recorded chunks: %w", err)
	}
	pc, err := decodeSet(p.Chunks, maxChunksPerShard)
	if err != nil {
		return false, fmt.Errorf("resume chunks: %w", err)
	}
	for i, w := range hc {
		if i < len(pc) {
			w &^= pc[i]
		}
		if w != 0 {
			return true, nil
		}
	}
	return false, nil
}
