// Package bpe is byte-level BPE as GPT-2, Llama 3, Qwen2 and OpenAI's
// tiktoken encodings tokenize: the text split into pieces by a known
// pattern, each piece's UTF-8 bytes merged pair by pair, lowest rank
// first, into token ids. A Tokenizer is read from a Hugging Face
// tokenizer.json (LoadHF) or a tiktoken rank file (LoadTiktoken); anything
// in them this package does not implement is refused by name, so a
// tokenizer either gives the reference library's ids or none at all.
//
// Invalid UTF-8: the references take strings, never bytes, so invalid
// bytes reach them only through a decode with replacement; Encode does
// the same decode (each maximal ill-formed subpart becomes U+FFFD, as
// Python's errors="replace" and JavaScript's TextDecoder do).
//
// Unicode versions: the split patterns' classes (\p{L}, \p{N}, \s...) are
// Unicode 16.0's (unicode16.go, generated), as Oniguruma in tokenizers
// 0.23.2 and regex-syntax in tiktoken 1.0.22 have them; NFC is Unicode
// 9.0's, as tokenizers' normalizer has it (nfc.go). The tests compare ids
// with those versions of the references (ref_test.go).
package bpe

import (
	"container/heap"
	"strings"
	"sync"
)

// Bounds on what is read from a tokenizer file.
const (
	// MaxFileBytes caps a tokenizer file: Llama 3's tokenizer.json is
	// 9 MB, o200k_base.tiktoken 3.6 MB.
	MaxFileBytes = 64 << 20
	// MaxVocab caps the vocab size and every id (Llama 3 has 128,256).
	MaxVocab = 1 << 20
	// MaxMerges caps the merges of a tokenizer.json (Llama 3 has 280,147).
	MaxMerges = 2 << 20
	// MaxTokenBytes caps one token's length in bytes.
	MaxTokenBytes = 1024
	// MaxAddedTokens caps the added (and special) tokens.
	MaxAddedTokens = 1 << 16
)

// Tokenizer turns text into token ids. It is safe for concurrent use.
type Tokenizer struct {
	// whole maps a piece's bytes to its id where that piece, whole, is
	// what merging its bytes gives (every token, with ignore_merges or
	// tiktoken, which look a piece up before merging), so the common
	// case is one map lookup.
	whole map[string]int32
	bytes [256]int32
	// pairs is the rank of two adjacent ids that merge, and what they
	// merge into.
	pairs pairTable

	pattern     Pattern
	split       splitter
	prefixSpace bool // ByteLevel add_prefix_space: a space before a segment that has none
	nfc         bool
	added       addedTokens // matched in the raw text first
	addedNorm   addedTokens // then in what is between, once normalized (tokenizers' normalized: true)
	bos, eos    []int32     // what the post-processor puts around a sequence
	size        int         // the largest id + 1

	caches  sync.Pool // *pieceCache: a call takes one, so calls at once each have their own
	noCache bool      // merge every piece (the benchmarks' and tests' baseline)
}

// Pattern is the split pattern the tokenizer uses.
func (t *Tokenizer) Pattern() Pattern { return t.pattern }

// VocabSize is the largest id it can give, plus one.
func (t *Tokenizer) VocabSize() int { return t.size }

// Template is what the post-processor adds around a sequence: Llama 3's
// <|begin_of_text|> before it, for instance. Both are empty for GPT-2
// (its ByteLevel post-processor adds nothing) and tiktoken.
func (t *Tokenizer) Template() (bos, eos []int32) { return t.bos, t.eos }

// AddedID is the id of an added or special token spelt exactly s
// (GPT-2's "<|endoftext|>"), and whether there is one: what a packer
// separates documents with.
func (t *Tokenizer) AddedID(s string) (int32, bool) {
	for _, a := range []*addedTokens{&t.added, &t.addedNorm} {
		if id, ok := a.lookup(s); ok {
			return id, true
		}
	}
	return 0, false
}

// Encode is the ids Hugging Face tokenizers' encode(text,
// add_special_tokens=addSpecial) gives, added and special tokens matched
// in the text (tiktoken's encode(text, allowed_special="all")).
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	var ids []int32
	if addSpecial {
		ids = append(ids, t.bos...)
	}
	ids = t.AppendIDs(ids, text, true, 0)
	if addSpecial {
		ids = append(ids, t.eos...)
	}
	return ids
}

// AppendIDs appends text's token ids to dst, without the template. With
// matchSpecial, added and special tokens in the text are their ids (Hugging
// Face's default; tiktoken's allowed_special="all"); without, they are
// text like any other (tiktoken's encode_ordinary). With limit > 0 it stops
// once dst holds at least limit ids: the pieces are independent, so the
// ids it gives are the first ones of the whole text's.
func (t *Tokenizer) AppendIDs(dst []int32, text string, matchSpecial bool, limit int) []int32 {
	text = validUTF8(text)
	var sc scratch
	if !t.noCache {
		sc.cache, _ = t.caches.Get().(*pieceCache)
		if sc.cache == nil {
			sc.cache = newPieceCache()
		}
		defer t.caches.Put(sc.cache)
	}
	for len(text) > 0 {
		seg, id, rest, found := text, int32(0), "", false
		if matchSpecial {
			seg, id, rest, found = t.added.cut(text)
		}
		dst = t.appendSegment(dst, seg, matchSpecial, limit, &sc)
		if limit > 0 && len(dst) >= limit {
			break
		}
		if found {
			dst = append(dst, id)
		}
		text = rest
	}
	return dst
}

// appendSegment appends the ids of a segment between added tokens matched
// in the raw text: normalized, split again at the added tokens matched in
// normalized text, each part pre-tokenized, as tokenizers'
// extract_and_normalize and pre_tokenize do.
func (t *Tokenizer) appendSegment(dst []int32, seg string, matchSpecial bool, limit int, sc *scratch) []int32 {
	if seg == "" {
		return dst
	}
	if t.nfc {
		seg = nfcAsTokenizers(seg)
	}
	for len(seg) > 0 {
		part, id, rest, found := seg, int32(0), "", false
		if matchSpecial {
			part, id, rest, found = t.addedNorm.cut(seg)
		}
		dst = t.appendPart(dst, part, limit, sc)
		if limit > 0 && len(dst) >= limit {
			break
		}
		if found {
			dst = append(dst, id)
		}
		seg = rest
	}
	return dst
}

func (t *Tokenizer) appendPart(dst []int32, part string, limit int, sc *scratch) []int32 {
	if part == "" {
		return dst
	}
	if t.prefixSpace && part[0] != ' ' {
		part = " " + part
	}
	for i := 0; i < len(part); {
		j := t.split(part, i)
		dst = t.appendPiece(dst, part[i:j], sc)
		if limit > 0 && len(dst) >= limit {
			break
		}
		i = j
	}
	return dst
}

// scratch holds one call's merge buffers and piece cache (nil: none).
type scratch struct {
	ids   []int32
	ranks []uint32
	cache *pieceCache
}

// shortPiece is the longest piece merged by scanning for the lowest pair
// (quadratic, but fastest for the short pieces text splits into); longer
// ones go through a heap, so a megabyte without a space is not a DoS.
const shortPiece = 128

func (t *Tokenizer) pair(a, b int32) uint32 { return t.pairs.rank(a, b) }

// appendPiece appends the ids of a piece, from the cache if it has it.
func (t *Tokenizer) appendPiece(dst []int32, p string, sc *scratch) []int32 {
	if len(p) == 1 {
		return append(dst, t.bytes[p[0]])
	}
	if sc.cache == nil || len(p) > cacheKeyBytes {
		return t.mergePiece(dst, p, sc)
	}
	e := sc.cache.slot(p)
	if out, ok := e.get(dst, p); ok {
		return out
	}
	n := len(dst)
	dst = t.mergePiece(dst, p, sc)
	e.put(p, dst[n:])
	return dst
}

// mergePiece appends the ids of a piece of two bytes or more: one lookup
// if it is a token whole, else its bytes merged.
func (t *Tokenizer) mergePiece(dst []int32, p string, sc *scratch) []int32 {
	if id, ok := t.whole[p]; ok {
		return append(dst, id)
	}
	if len(p) > shortPiece {
		return t.mergeLong(dst, p)
	}
	ids, ranks := sc.ids[:0], sc.ranks[:0]
	for k := 0; k < len(p); k++ {
		ids = append(ids, t.bytes[p[k]])
	}
	for k := 0; k+1 < len(ids); k++ {
		ranks = append(ranks, t.pair(ids[k], ids[k+1]))
	}
	for len(ids) > 1 {
		m, best := -1, uint32(noMerge)
		for k, r := range ranks {
			if r < best {
				m, best = k, r
			}
		}
		if m < 0 {
			break
		}
		ids[m] = t.pairs.merged[best]
		ids = append(ids[:m+1], ids[m+2:]...)
		ranks = append(ranks[:m], ranks[m+1:]...)
		if m > 0 {
			ranks[m-1] = t.pair(ids[m-1], ids[m])
		}
		if m < len(ranks) {
			ranks[m] = t.pair(ids[m], ids[m+1])
		}
	}
	sc.ids, sc.ranks = ids, ranks
	return append(dst, ids...)
}

// mergeLong merges as appendPiece does (the lowest rank first, the
// leftmost of equals), in O(n log n): symbols in a linked list, candidate
// pairs in a heap, stale ones skipped when they come up.
func (t *Tokenizer) mergeLong(dst []int32, p string) []int32 {
	n := len(p)
	ids := make([]int32, n)
	next := make([]int32, n)
	prev := make([]int32, n)
	for k := range n {
		ids[k] = t.bytes[p[k]]
		next[k], prev[k] = int32(k+1), int32(k-1)
	}
	next[n-1] = -1
	h := make(pairHeap, 0, n)
	for k := 0; k+1 < n; k++ {
		if r := t.pair(ids[k], ids[k+1]); r != noMerge {
			h = append(h, cand{r, int32(k)})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		c := heap.Pop(&h).(cand)
		i := c.pos
		j := next[i]
		if ids[i] < 0 || j < 0 || t.pair(ids[i], ids[j]) != c.rank {
			continue // stale: one of its symbols merged since
		}
		ids[i] = t.pairs.merged[c.rank]
		ids[j] = -1
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		if pi := prev[i]; pi >= 0 {
			if r := t.pair(ids[pi], ids[i]); r != noMerge {
				heap.Push(&h, cand{r, pi})
			}
		}
		if ni := next[i]; ni >= 0 {
			if r := t.pair(ids[i], ids[ni]); r != noMerge {
				heap.Push(&h, cand{r, i})
			}
		}
	}
	for k := int32(0); k >= 0; k = next[k] {
		dst = append(dst, ids[k])
	}
	return dst
}

type cand struct {
	rank uint32
	pos  int32
}

type pairHeap []cand

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(cand)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// addedTokens finds added and special tokens in text: the leftmost match,
// the longest of those that start there (Hugging Face's Aho-Corasick is
// leftmost-longest; tiktoken's special tokens are not prefixes of each
// other, so its leftmost-first alternation agrees). A trie: a position
// costs the length of the longest token prefix there, so text full of
// "<|" costs little more than any other.
type addedTokens struct {
	nodes []trieNode
	only  int // the one first byte all tokens share, or -1
}

type trieNode struct {
	edges []trieEdge
	id    int32 // the token ending here, or -1
}

type trieEdge struct {
	b    byte
	node int32
}

type addedToken struct {
	s  string
	id int32
}

func newAddedTokens(toks []addedToken) addedTokens {
	a := addedTokens{only: -1}
	if len(toks) == 0 {
		return a
	}
	a.nodes = []trieNode{{id: -1}}
	firsts := map[byte]bool{}
	for _, tk := range toks {
		firsts[tk.s[0]] = true
		n := int32(0)
		for i := 0; i < len(tk.s); i++ {
			n = a.child(n, tk.s[i])
		}
		a.nodes[n].id = tk.id // a token listed twice: the later id, as a map would
	}
	if len(firsts) == 1 {
		a.only = int(toks[0].s[0])
	}
	return a
}

func (a *addedTokens) child(n int32, b byte) int32 {
	for _, e := range a.nodes[n].edges {
		if e.b == b {
			return e.node
		}
	}
	a.nodes = append(a.nodes, trieNode{id: -1})
	c := int32(len(a.nodes) - 1)
	a.nodes[n].edges = append(a.nodes[n].edges, trieEdge{b, c})
	return c
}

func (a *addedTokens) next(n int32, b byte) int32 {
	for _, e := range a.nodes[n].edges {
		if e.b == b {
			return e.node
		}
	}
	return -1
}

func (a *addedTokens) lookup(s string) (int32, bool) {
	if len(a.nodes) == 0 || s == "" {
		return 0, false
	}
	n := int32(0)
	for i := 0; i < len(s) && n >= 0; i++ {
		n = a.next(n, s[i])
	}
	if n < 0 || a.nodes[n].id < 0 {
		return 0, false
	}
	return a.nodes[n].id, true
}

// cut splits text at its first added token: the text before it, its id,
// the text after it, and whether there was one.
func (a *addedTokens) cut(text string) (before string, id int32, after string, found bool) {
	if len(a.nodes) == 0 {
		return text, 0, "", false
	}
	for i := 0; i < len(text); i++ {
		if a.only >= 0 {
			k := strings.IndexByte(text[i:], byte(a.only))
			if k < 0 {
				break
			}
			i += k
		}
		end, id := -1, int32(0)
		for n, j := int32(0), i; j < len(text); j++ {
			if n = a.next(n, text[j]); n < 0 {
				break
			}
			if a.nodes[n].id >= 0 {
				end, id = j+1, a.nodes[n].id
			}
		}
		if end >= 0 {
			return text[:i], id, text[end:], true
		}
	}
	return text, 0, "", false
}
