package assembly

import (
	"fmt"
	"maps"
	"slices"

	"github.com/sluice-project/sluice/wire"
)

// ReplaySet returns, per epoch, the shards that must be produced again for
// a reader to resume at position p when its memory holds h (h is at or
// past p): those not complete in p of which h has a chunk handed out in
// full beyond p, or that h has complete (its task may be settled), or that
// an earlier resume replayed, or that a lagging reader owes (did not
// keep). What was handed out is no longer in memory; chunks still held,
// rows of them handed out and shard ends are carried over by the rewind
// (carry). Producing a shard once too often costs only time (copies are
// dropped by ChunkRef). Epochs before p.Finished are left out. It is pure:
// the agent calls it on its snapshot.
func ReplaySet(h, p Position, epochs, shards int) (map[int][]int, error) {
	out := map[int][]int{}
	for e := max(p.Finished, 0); e < epochs; e++ {
		pe := p.Epochs[e]
		pComplete, err := DecodeSet(pe.Complete, shards)
		if err != nil {
			return nil, fmt.Errorf("resume position: epoch %d: complete shards: %w", e, err)
		}
		if e < h.Finished {
			for s := range shards {
				if !pComplete.Has(s) {
					out[e] = append(out[e], s)
				}
			}
			continue
		}
		he, ok := h.Epochs[e]
		if !ok {
			continue
		}
		hComplete, err := DecodeSet(he.Complete, shards)
		if err != nil {
			return nil, fmt.Errorf("recorded position: epoch %d: complete shards: %w", e, err)
		}
		hReplayed, err := DecodeSet(he.Replayed, shards)
		if err != nil {
			return nil, fmt.Errorf("recorded position: epoch %d: replayed shards: %w", e, err)
		}
		hOwed, err := DecodeSet(he.Owed, shards)
		if err != nil {
			return nil, fmt.Errorf("recorded position: epoch %d: owed shards: %w", e, err)
		}
		for s := range shards {
			if pComplete.Has(s) {
				continue
			}
			more := hComplete.Has(s) || hReplayed.Has(s) || hOwed.Has(s)
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
func ackedMore(h, p ShardPosition) (bool, error) {
	hr, err := DecodeSet(h.Handed, MaxRowsPerShard)
	if err != nil {
		return false, fmt.Errorf("recorded rows: %w", err)
	}
	pr, err := DecodeSet(p.Handed, MaxRowsPerShard)
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
	hc, err := DecodeSet(h.Chunks, MaxChunksPerShard)
	if err != nil {
		return false, fmt.Errorf("recorded chunks: %w", err)
	}
	pc, err := DecodeSet(p.Chunks, MaxChunksPerShard)
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

// Carry applies to fresh (a rewound position) what from holds that fresh
// lacks: the chunks held and the shard ends seen of shards fresh has not
// complete, in order; it returns the batches they make. Rows fresh records
// as handed out are skipped by fresh's own bookkeeping.
func Carry(from, fresh *Assembler) []ReadyBatch {
	var out []ReadyBatch
	epochs := slices.Sorted(maps.Keys(from.Open))
	for _, e := range epochs {
		ep := from.Open[e]
		for _, s := range slices.Sorted(maps.Keys(ep.Shards)) {
			if fresh.ShardComplete(e, s) {
				continue
			}
			sh := ep.Shards[s]
			for _, h := range sh.Held {
				add := func() (Outcome, error) { return fresh.addAt(h.ref, h.first, h.data) }
				if h.Holder != "" {
					add = func() (Outcome, error) { return fresh.AddRemote(h.ref, h.Holder, h.first, h.Rows, from.Schema, "") }
				}
				if o, err := add(); err == nil {
					out = append(out, o.Batches...)
				}
			}
			if sh.Total >= 0 {
				ref := wire.ChunkRef{Job: fresh.job, Epoch: e, Shard: s, Chunk: -1}
				if o, err := fresh.End(ref, wire.ShardEnd{Samples: sh.Total}, false); err == nil {
					out = append(out, o.Batches...)
				}
			}
		}
	}
	return out
}

// MarkReplayed notes shards as being replayed.
func (a *Assembler) MarkReplayed(shards map[int][]int) {
	for e, ss := range shards {
		if e < a.Finished || e >= a.epochs {
			continue
		}
		ep := a.Epoch(e)
		for _, s := range ss {
			if !ep.Complete.Has(s) {
				ep.Replayed.Add(s)
			}
		}
	}
	a.Version++
}
