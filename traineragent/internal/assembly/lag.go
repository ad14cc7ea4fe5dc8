package assembly

import (
	"github.com/sluice-project/sluice/wire"
)

// A lagging reader does not hold back the others. The readers an agent
// serves share each shard's output, and the agent takes no task while the
// chunks they hold fill the job's output buffer; one slow trial would
// thus set every trial's pace. A reader that lags (shedding: its prefetch
// is full, it holds at least its lag bound, and another reader wants more)
// keeps nothing of shards it has not started: it notes them owed in its
// position (their tasks may then settle without it), and once its ranks
// run out of steps in an epoch with owed shards it asks the agent to
// produce them again (dispatch.Replay), which it never sheds. The other
// readers go on at their pace; the laggard pays with those shards
// produced twice and a replay's latency.

// Shedding says, per reader, whether it lags: the job has several
// readers, the reader wants no more (its prefetch is full), it holds at
// least bound bytes, and another reader wants more. It is pure.
func Shedding(held []int64, wants []bool, bound int64) []bool {
	out := make([]bool, len(held))
	if len(held) < 2 || bound <= 0 {
		return out
	}
	for i := range held {
		if wants[i] || held[i] < bound {
			continue
		}
		for j := range wants {
			if j != i && wants[j] {
				out[i] = true
				break
			}
		}
	}
	return out
}

// Shed drops the output of shard ref.Shard of epoch ref.Epoch for a
// lagging reader if the reader has nothing of it (no chunk held or handed
// out, no end) and is not waiting for it as a replay: the shard is noted
// owed, and, for the settling of its task, complete for this reader. It
// reports whether it dropped it (an owed shard's output is dropped).
func (a *Assembler) Shed(ref wire.ChunkRef) bool {
	if ref.Epoch < a.Finished || ref.Epoch >= a.epochs || ref.Shard < 0 || ref.Shard >= a.Shards {
		return false
	}
	ep := a.Epoch(ref.Epoch)
	switch {
	case ep.Complete.Has(ref.Shard) || ep.Replayed.Has(ref.Shard):
		return false
	case ep.owed.Has(ref.Shard):
		return true
	}
	if sh := ep.Shards[ref.Shard]; sh != nil && !sh.empty() {
		return false
	}
	ep.owed.Add(ref.Shard)
	a.Version++
	a.Completed = append(a.Completed, ShardRef{ref.Epoch, ref.Shard})
	return true
}

// OwedDue are the shards of epoch e owed and not asked for yet.
func (a *Assembler) OwedDue(e int) []int {
	ep := a.Open[e]
	if ep == nil {
		return nil
	}
	var out []int
	for s := range a.Shards {
		if ep.owed.Has(s) && !ep.Replayed.Has(s) && !ep.Complete.Has(s) {
			out = append(out, s)
		}
	}
	return out
}

// Owes reports whether the reader owes shard s of epoch e (a settled task
// needs nothing more from it).
func (a *Assembler) Owes(e, s int) bool {
	ep := a.Open[e]
	return ep != nil && ep.owed.Has(s) && !ep.Complete.Has(s)
}
