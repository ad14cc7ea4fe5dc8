package assembly

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// PositionVersion is the format of a position record: 2 records a
// shard's rows by shard row; 1 (still read) by chunk index.
const PositionVersion = 2

// MaxChunksPerShard bounds chunk indices read from a position record.
const MaxChunksPerShard = 1 << 24

// maxPositionRows bounds the rows (and format 1 chunks) a position
// records as handed out over its shards in progress, counted as the
// bitmaps they take (32 MiB): a resume's state comes from the trainer.
const maxPositionRows = 1 << 28

// Position is a reader's place in a job's output, stored as JSON in
// wire.ReadersBucket under wire.ReaderKey(job, reader): what was handed out
// to the trainer, nothing about what merely arrived. Example:
//
//	{"v":2,"submitted":"2026-11-23T05:39:25.123Z","finished":1,"epochs":{"1":{"complete":"0-4999,5002",
//	  "shards":{"5000":{"samples":40,"handed":"0-16"}}}}}
//
// says epoch 0 is finished; of epoch 1, shards 0-4999 and 5002 are complete
// (every row handed out, shard end seen); of shard 5000 the end announced
// 40 rows, rows 0 to 16 were handed out. Rows are shard rows (a chunk's
// wire.MetaFirst plus its row in the chunk), whatever chunks brought
// them. Shard and row sets are written as ranges, or as a base64 bitmap
// where that is shorter (EncodeSet), so an epoch of 10,000 shards takes
// at most about 1.7 KB whatever order its shards complete in.
//
// Format 1 recorded a shard by chunk index ("end": the chunk count,
// "chunks": chunks handed out in full, "rows": leading rows handed out
// per chunk); such entries are still read, and applied to the chunks of
// those indices when they come.
type Position struct {
	Version int `json:"v"`
	// Submitted is the submission time of the job the position is of: a
	// job deleted and submitted again under its id starts afresh.
	Submitted string                `json:"submitted,omitempty"`
	Finished  int                   `json:"finished"` // epochs 0..Finished-1
	Epochs    map[int]EpochPosition `json:"epochs,omitempty"`
}

// EpochPosition is the position within an unfinished epoch.
type EpochPosition struct {
	Complete string                `json:"complete,omitempty"`
	Shards   map[int]ShardPosition `json:"shards,omitempty"`
	// Replayed are shards (not complete) that a resume asked to be
	// re-produced: their tasks may be settled, so an agent that restarts
	// with this position sends them again, and a later resume from a
	// position before them asks again (see ReplaySet).
	Replayed string `json:"replayed,omitempty"`
	// Owed are shards (not complete) a lagging reader did not keep: their
	// tasks may be settled, and the reader asks for them again when its
	// ranks reach them (see lag.go).
	Owed string `json:"owed,omitempty"`
	// Sources, in a mixed job, are the rows of each source handed out in
	// the epoch, so that the mixing schedule goes on where it was
	// (wire.MixResume).
	Sources []int `json:"sources,omitempty"`
}

// ShardPosition is the position within a shard of an epoch that is not
// complete.
type ShardPosition struct {
	// Samples is the rows the shard has, once its end was seen.
	Samples *int `json:"samples,omitempty"`
	// Handed are the shard rows handed out.
	Handed string `json:"handed,omitempty"`

	// Format 1, by chunk index, until those chunks come again: End is
	// the chunk count of the shard end (not read: the end comes again).
	End    *int        `json:"end,omitempty"`
	Chunks string      `json:"chunks,omitempty"` // chunks handed out in full
	Rows   map[int]int `json:"rows,omitempty"`   // chunk -> leading rows handed out
}

// Snapshot is the current position.
func (a *Assembler) Snapshot() Position {
	p := Position{Version: PositionVersion, Finished: a.Finished}
	for e, ep := range a.Open {
		var out EpochPosition
		out.Complete = EncodeSet(ep.Complete)
		out.Replayed = EncodeSet(ep.Replayed.minus(ep.Complete))
		out.Owed = EncodeSet(ep.owed.minus(ep.Complete))
		if slices.ContainsFunc(ep.handedBySrc, func(n int) bool { return n > 0 }) {
			out.Sources = slices.Clone(ep.handedBySrc)
		}
		for s, sh := range ep.Shards {
			var sp ShardPosition
			if sh.Total >= 0 {
				total := sh.Total
				sp.Samples = &total
			}
			sp.Handed = EncodeSet(sh.handed)
			for c, n := range sh.legacyRows {
				sp.rows(c, n)
			}
			sp.Chunks = EncodeSet(sh.legacyFull)
			if sp.Samples != nil || sp.Handed != "" || sp.Chunks != "" || sp.Rows != nil {
				if out.Shards == nil {
					out.Shards = map[int]ShardPosition{}
				}
				out.Shards[s] = sp
			}
		}
		if out.Complete != "" || out.Shards != nil || out.Replayed != "" || out.Owed != "" || out.Sources != nil {
			if p.Epochs == nil {
				p.Epochs = map[int]EpochPosition{}
			}
			p.Epochs[e] = out
		}
	}
	return p
}

func (sp *ShardPosition) rows(c, n int) {
	if sp.Rows == nil {
		sp.Rows = map[int]int{}
	}
	sp.Rows[c] = n
}

// Restore loads a position into an assembler that has seen no message yet.
func (a *Assembler) Restore(p Position) error {
	if p.Version != PositionVersion && p.Version != 1 {
		return fmt.Errorf("position format %d: this agent reads 1 and %d", p.Version, PositionVersion)
	}
	if p.Finished < 0 || p.Finished > a.epochs {
		return fmt.Errorf("position: finished epochs %d: the job has %d", p.Finished, a.epochs)
	}
	a.Finished = p.Finished
	clear(a.Open)
	rowWords := maxPositionRows / 64 // a position from a trainer's state is input
	for _, e := range slices.Sorted(maps.Keys(p.Epochs)) {
		ep := p.Epochs[e]
		if e < p.Finished || e >= a.epochs {
			return fmt.Errorf("position: epoch %d: want %d..%d", e, p.Finished, a.epochs-1)
		}
		complete, err := DecodeSet(ep.Complete, a.Shards)
		if err != nil {
			return fmt.Errorf("position: epoch %d: complete shards: %w", e, err)
		}
		replayed, err := DecodeSet(ep.Replayed, a.Shards)
		if err != nil {
			return fmt.Errorf("position: epoch %d: replayed shards: %w", e, err)
		}
		owed, err := DecodeSet(ep.Owed, a.Shards)
		if err != nil {
			return fmt.Errorf("position: epoch %d: owed shards: %w", e, err)
		}
		st := a.Epoch(e)
		if len(ep.Sources) > 0 {
			if a.mix == nil || len(ep.Sources) != len(a.mix.slots) {
				return fmt.Errorf("position: epoch %d: rows of %d sources: the job mixes %d", e, len(ep.Sources), len(st.handedBySrc))
			}
			for i, n := range ep.Sources {
				if n < 0 || n > maxPositionRows {
					return fmt.Errorf("position: epoch %d: %d rows of source %d: want 0..%d", e, n, i, maxPositionRows)
				}
			}
			copy(st.handedBySrc, ep.Sources)
		}
		st.Complete = complete
		st.Replayed = replayed
		st.owed = owed
		st.nComplete = complete.countBelow(a.Shards)
		st.arrived = st.nComplete
		if a.mix != nil {
			for s := range a.Shards {
				if complete.Has(s) {
					st.srcArrived[a.mix.sourceOf(s)]++
				}
			}
		}
		for s, sp := range ep.Shards {
			if s < 0 || s >= a.Shards || complete.Has(s) {
				return fmt.Errorf("position: epoch %d: shard %d: out of range or also complete", e, s)
			}
			sh := newShardState()
			limit := MaxRowsPerShard
			if sp.Samples != nil {
				if *sp.Samples < 0 || *sp.Samples > MaxRowsPerShard {
					return fmt.Errorf("position: epoch %d: shard %d: samples %d: want 0..%d", e, s, *sp.Samples, MaxRowsPerShard)
				}
				sh.Total = *sp.Samples
				limit = sh.Total
			}
			if sh.handed, err = DecodeSet(sp.Handed, limit); err != nil {
				return fmt.Errorf("position: epoch %d: shard %d: rows handed out: %w", e, s, err)
			}
			if rowWords -= len(sh.handed); rowWords < 0 {
				return fmt.Errorf("position: epoch %d: shard %d: more rows handed out than a position may record (%d in all)", e, s, maxPositionRows)
			}
			sh.got = slices.Clone(sh.handed)
			full, err := DecodeSet(sp.Chunks, MaxChunksPerShard)
			if err != nil {
				return fmt.Errorf("position: epoch %d: shard %d: chunks: %w", e, s, err)
			}
			if rowWords -= len(full); rowWords < 0 {
				return fmt.Errorf("position: epoch %d: shard %d: more chunks handed out than a position may record", e, s)
			}
			sh.legacyFull = full
			if len(sp.Rows) > 0 {
				sh.legacyRows = map[int]int{}
			}
			chunks := MaxChunksPerShard
			if sp.End != nil && *sp.End >= 0 {
				chunks = min(chunks, *sp.End)
			}
			if len(full)*64 > chunks && full.countBelow(len(full)*64) != full.countBelow(chunks) {
				return fmt.Errorf("position: epoch %d: shard %d: chunks %q: beyond its end's %d", e, s, sp.Chunks, chunks)
			}
			for c, n := range sp.Rows {
				if c < 0 || c >= chunks || n <= 0 || n > MaxRowsPerChunk || full.Has(c) {
					return fmt.Errorf("position: epoch %d: shard %d: rows of chunk %d: %d: out of range", e, s, c, n)
				}
				sh.legacyRows[c] = n
			}
			st.Shards[s] = sh
			if sh.arrivedEvery() {
				sh.arrivedAll = true
				st.arrived++
				a.sourceArrived(e, st, s, nil) // nothing is staged yet
			}
			a.checkShard(e, s)
		}
		if st.arrived == a.Shards {
			st.Cut = true
		}
	}
	a.compact()
	return nil
}

// EncodePosition is the stored form of p.
func EncodePosition(p Position) ([]byte, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding position: %w", err)
	}
	return data, nil
}

// DecodePosition reads a stored position.
func DecodePosition(data []byte) (Position, error) {
	var p Position
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("decoding position: %w", err)
	}
	return p, nil
}
