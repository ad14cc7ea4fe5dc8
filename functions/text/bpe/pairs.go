package bpe

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// pairTable is the merges: the rank of two adjacent ids that merge (the
// merge loop's one question, asked for every pair of every piece the cache
// does not have) and, by rank, the id they merge into. An open-addressing
// table of 8-byte slots (ids and rank packed), linear probing, at most 3/4
// full: a lookup is a multiply and mostly one cache line, where Go's
// map[uint64]uint64 took 43% of a replica's CPU, in 16-byte entries (Llama
// 3's merges: 4 MiB of slots here). Built once, then only read.
type pairTable struct {
	slots  []uint64 // a<<41 | b<<21 | rank, or empty
	mask   uint64
	seed   uint64  // random: no tokenizer file can line its pairs up in one run of slots
	n      int     // keys set
	merged []int32 // by rank: the id the pair merges into
}

// noMerge is the rank of a pair that does not merge.
const noMerge = math.MaxUint32

// A slot holds two ids of 20 bits and a rank of 21.
const (
	idBits   = 20
	rankBits = 21
	_        = uint(1<<idBits - MaxVocab)    // ids fit
	_        = uint(1<<rankBits - MaxMerges) // merge ranks fit
	_        = uint(1<<rankBits - MaxVocab)  // tiktoken ranks (ids) fit
)

// emptySlot is no pair's slot: its key is over 40 bits.
const emptySlot = math.MaxUint64

// newPairTable is an empty table with room for n pairs before it grows,
// and for ranks 0..ranks-1.
func newPairTable(n, ranks int) pairTable {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	t := pairTable{slots: make([]uint64, size), mask: uint64(size - 1), seed: rand.Uint64(), merged: make([]int32, ranks)}
	for i := range t.slots {
		t.slots[i] = emptySlot
	}
	return t
}

func pairKey(a, b int32) uint64 { return uint64(a)<<idBits | uint64(b) }

func (t *pairTable) index(k uint64) uint64 {
	hi, lo := bits.Mul64(k^t.seed, 0x9E3779B97F4A7C15)
	return (hi ^ lo) & t.mask
}

// rank is the rank of a then b, or noMerge.
func (t *pairTable) rank(a, b int32) uint32 {
	if t.slots == nil {
		return noMerge
	}
	k := pairKey(a, b)
	for i := t.index(k); ; i = (i + 1) & t.mask {
		s := t.slots[i]
		if s>>rankBits == k {
			return uint32(s & (1<<rankBits - 1))
		}
		if s == emptySlot {
			return noMerge
		}
	}
}

// set makes a then b merge into m at rank r, replacing the rank they had.
// The ids are under MaxVocab, r under the table's ranks.
func (t *pairTable) set(a, b int32, r uint32, m int32) {
	if (t.n+1)*4 > len(t.slots)*3 {
		old := t.slots
		grown := newPairTable(len(old), 0) // twice the slots
		grown.n, grown.merged = 0, t.merged
		*t = grown
		for _, s := range old {
			if s != emptySlot {
				t.put(s)
			}
		}
	}
	t.put(pairKey(a, b)<<rankBits | uint64(r))
	t.merged[r] = m
}

func (t *pairTable) put(slot uint64) {
	k := slot >> rankBits
	for i := t.index(k); ; i = (i + 1) & t.mask {
		if s := t.slots[i]; s == emptySlot {
			t.n++
		} else if s>>rankBits != k {
			continue
		}
		t.slots[i] = slot
		return
	}
}
