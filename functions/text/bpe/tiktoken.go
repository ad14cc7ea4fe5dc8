package bpe

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Encoding is what a tiktoken rank file does not say: its split pattern
// and its special tokens, as tiktoken's tiktoken_ext/openai_public.py
// defines them.
type Encoding struct {
	Name    string
	Pattern Pattern
	Special map[string]int32
}

// Encodings are the tiktoken encodings LoadTiktoken knows.
var Encodings = map[string]Encoding{
	"r50k_base": {"r50k_base", PatternGPT2, map[string]int32{"<|endoftext|>": 50256}},
	"p50k_base": {"p50k_base", PatternGPT2, map[string]int32{"<|endoftext|>": 50256}},
	"cl100k_base": {"cl100k_base", PatternCL100k, map[string]int32{
		"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
		"<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}},
	"o200k_base": {"o200k_base", PatternO200k, map[string]int32{"<|endoftext|>": 199999, "<|endofprompt|>": 200018}},
}

// EncodingNames lists Encodings' names, sorted.
func EncodingNames() []string {
	var n []string
	for k := range Encodings {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// LoadTiktoken reads a tiktoken rank file (one base64 token and its rank
// a line, as cl100k_base.tiktoken) of the named encoding. A piece that is
// a token is that token; otherwise its bytes merge, the pair whose
// concatenation has the lowest rank first, as tiktoken's byte_pair_merge.
func LoadTiktoken(r io.Reader, encoding string) (*Tokenizer, error) {
	enc, ok := Encodings[encoding]
	if !ok {
		return nil, fmt.Errorf("unknown tiktoken encoding %q (known: %s)", encoding, strings.Join(EncodingNames(), ", "))
	}
	t := &Tokenizer{pattern: enc.Pattern, split: enc.Pattern.splitter(), whole: map[string]int32{}}
	sc := bufio.NewScanner(io.LimitReader(r, MaxFileBytes+1))
	sc.Buffer(make([]byte, 0, 4096), 2*MaxTokenBytes)
	read := 0
	seen := make(map[int32]bool)
	for line := 1; sc.Scan(); line++ {
		read += len(sc.Bytes()) + 1
		if read > MaxFileBytes+1 {
			return nil, fmt.Errorf("over the %d MiB limit", MaxFileBytes>>20)
		}
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		b64, rankStr, ok := bytes.Cut(l, []byte(" "))
		if !ok {
			return nil, fmt.Errorf("line %d: want a base64 token, a space and its rank", line)
		}
		tok, err := base64.StdEncoding.DecodeString(string(b64))
		if err != nil || len(tok) == 0 {
			return nil, fmt.Errorf("line %d: the token is not base64", line)
		}
		if len(tok) > MaxTokenBytes {
			return nil, fmt.Errorf("line %d: a token of %d bytes, over the limit of %d", line, len(tok), MaxTokenBytes)
		}
		rank, err := strconv.Atoi(string(rankStr))
		if err != nil || rank < 0 || rank >= MaxVocab {
			return nil, fmt.Errorf("line %d: rank %q: want 0..%d", line, clip(string(rankStr), 20), MaxVocab-1)
		}
		if seen[int32(rank)] {
			return nil, fmt.Errorf("line %d: rank %d given twice", line, rank)
		}
		if _, dup := t.whole[string(tok)]; dup {
			return nil, fmt.Errorf("line %d: a token given twice", line)
		}
		seen[int32(rank)] = true
		t.whole[string(tok)] = int32(rank)
		t.size = max(t.size, rank+1)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading ranks: %w", err)
	}
	if len(t.whole) > MaxVocab {
		return nil, fmt.Errorf("%d tokens, over the limit of %d", len(t.whole), MaxVocab)
	}
	for b := range 256 {
		id, ok := t.whole[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("no token for byte 0x%02x: not a byte-level rank file", b)
		}
		t.bytes[b] = id
	}
	// Two adjacent tokens merge into their concatenation, at its rank.
	t.pairs = newPairTable(len(t.whole), t.size)
	for s, id := range t.whole {
		for k := 1; k < len(s); k++ {
			a, oka := t.whole[s[:k]]
			b, okb := t.whole[s[k:]]
			if oka && okb {
				t.pairs.set(a, b, uint32(id), id) // tiktoken's rank is the id
			}
		}
	}
	var toks []addedToken
	for s, id := range enc.Special {
		toks = append(toks, addedToken{s, id})
		t.size = max(t.size, int(id)+1)
	}
	t.added = newAddedTokens(toks)
	return t, nil
}
