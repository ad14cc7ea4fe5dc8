package bpe

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// randomWords is n words of 1 to 40 letters (some over cacheKeyBytes, some
// merging into more than cacheIDs ids), from a few letters that merge (a,
// b, Ġa), others that do not, and a two-byte one, separated by spaces and
// the odd newline: more distinct pieces than the cache has entries, so
// slots are shared and evicted, and many repeats, so they hit.
func randomWords(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		for range 1 + r.IntN(40) {
			b.WriteString([]string{"a", "a", "b", "b", "x", "é"}[r.IntN(6)])
		}
		b.WriteString([]string{" ", " ", " ", "\n"}[r.IntN(4)])
	}
	return b.String()
}

// The cache gives the ids merging gives: hits, misses, evictions, pieces
// too long or with too many ids for it, and calls at once.
func TestCacheGivesTheMergedIDs(t *testing.T) {
	tok, err := LoadHF(strings.NewReader(tinyHF(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := LoadHF(strings.NewReader(tinyHF(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	plain.noCache = true
	r := rand.New(rand.NewPCG(3, 4))
	var texts []string
	for range 200 {
		texts = append(texts, randomWords(r, 1+r.IntN(200)))
	}
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = plain.AppendIDs(nil, s, true, 0)
	}
	errs := make(chan string, 4)
	for g := range 4 {
		go func() {
			for pass := range 3 { // the later passes mostly hit
				for i := range texts {
					i := (i + g*len(texts)/4) % len(texts)
					if got := tok.AppendIDs(nil, texts[i], true, 0); !equal(got, want[i]) {
						errs <- fmt.Sprintf("pass %d text %d %q: got %v, want %v", pass, i, clipQ(texts[i]), got, want[i])
						return
					}
				}
			}
			errs <- ""
		}()
	}
	for range 4 {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}

// Millions of distinct pieces fill the cache's fixed table and no more: a
// call allocates its ids, not memory per piece.
func TestCacheIsBounded(t *testing.T) {
	tok, err := LoadHF(strings.NewReader(tinyHF(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	text := randomWords(rand.New(rand.NewPCG(5, 6)), 1<<17) // 2.7 MB, 131,072 words
	dst := make([]int32, 0, len(text))
	tok.AppendIDs(dst, text, true, 0) // the cache and scratch made
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	tok.AppendIDs(dst, text, true, 0)
	runtime.ReadMemStats(&m1)
	// A cache of 256 KiB, should the pool have dropped it meanwhile.
	if n := m1.TotalAlloc - m0.TotalAlloc; n > 1<<20 {
		t.Errorf("encoding %d MB of distinct words allocated %d bytes", len(text)>>20, n)
	}
}

// The pair table agrees with a map: ranks set, replaced, and absent,
// across its growth.
func TestPairTable(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var pt pairTable
	pt.merged = make([]int32, 1<<rankBits)
	type pair struct{ a, b int32 }
	want := map[pair]uint32{}
	for i := range 100000 {
		p := pair{r.Int32N(MaxVocab), r.Int32N(MaxVocab)}
		if i%10 == 0 {
			p = pair{r.Int32N(300), r.Int32N(300)} // often set again
		}
		rank := uint32(r.IntN(1 << rankBits))
		pt.set(p.a, p.b, rank, p.a)
		want[p] = rank
	}
	want[pair{MaxVocab - 1, MaxVocab - 1}] = 1<<rankBits - 1 // the largest slot is not empty
	pt.set(MaxVocab-1, MaxVocab-1, 1<<rankBits-1, 0)
	if pt.n != len(want) || pt.n*4 > len(pt.slots)*3 {
		t.Errorf("%d keys in %d slots, want %d", pt.n, len(pt.slots), len(want))
	}
	for p, rank := range want {
		if got := pt.rank(p.a, p.b); got != rank {
			t.Fatalf("rank(%d, %d) = %d, want %d", p.a, p.b, got, rank)
		}
	}
	for range 100000 {
		p := pair{r.Int32N(MaxVocab), r.Int32N(MaxVocab)}
		if _, ok := want[p]; !ok && pt.rank(p.a, p.b) != noMerge {
			t.Fatalf("rank(%d, %d) = %d, want none", p.a, p.b, pt.rank(p.a, p.b))
		}
	}
}

// BenchmarkDistinctPieces is the cache's worst case: every piece new
// (1 MB of random words), so it only costs, a probe and a store each;
// with the tiny vocab, whose merges are few, that cost shows the most.
//
//	go test -run '^$' -bench BenchmarkDistinctPieces -cpu 1 ./functions/text/bpe/
func BenchmarkDistinctPieces(b *testing.B) {
	tok, err := LoadHF(strings.NewReader(tinyHF(b, nil)))
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 10))
	var sb strings.Builder
	for sb.Len() < 1<<20 {
		for range 3 + r.IntN(12) {
			sb.WriteByte(byte('a' + r.IntN(26)))
		}
		sb.WriteByte(' ')
	}
	text := sb.String()
	for _, mode := range []string{"nocache", "cache"} {
		b.Run(mode, func(b *testing.B) {
			tok.noCache = mode == "nocache"
			defer func() { tok.noCache = false }()
			b.SetBytes(int64(len(text)))
			var ids []int32
			for b.Loop() {
				ids = tok.AppendIDs(ids[:0], text, true, 0)
			}
		})
	}
}
