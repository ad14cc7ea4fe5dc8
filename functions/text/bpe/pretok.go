package bpe

import (
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizers split text into pieces as the published split
// regexes do. Those use \p{L}, \p{N}, a negative lookahead (\s+(?!\S)) and
// case-insensitive contractions, which Go's regexp cannot express, so each
// known pattern is a hand-written scanner with the same leftmost-first,
// backtracking semantics; a pattern not listed here is refused by name.

// Pattern names a known split pattern.
type Pattern string

const (
	// PatternGPT2 is GPT-2's (the ByteLevel pre-tokenizer's own regex).
	PatternGPT2 Pattern = "gpt2"
	// PatternCL100k is cl100k_base's, which Llama 3 also uses.
	PatternCL100k Pattern = "cl100k"
	// PatternQwen2 is cl100k's with single digits (\p{N} for \p{N}{1,3}).
	PatternQwen2 Pattern = "qwen2"
	// PatternO200k is o200k_base's (cased words, marks, contractions after a word).
	PatternO200k Pattern = "o200k"
	// PatternNone leaves the text whole (ByteLevel with use_regex false alone).
	PatternNone Pattern = "none"
)

// The regexes as tokenizer.json and tiktoken spell them.
const (
	regexGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	regexCL100k = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexO200k  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// patternOf names the scanner for a split regex, or "" when there is none.
func patternOf(regex string) Pattern {
	switch regex {
	case regexGPT2:
		return PatternGPT2
	case regexCL100k:
		return PatternCL100k
	case regexQwen2:
		return PatternQwen2
	case regexO200k:
		return PatternO200k
	}
	return ""
}

// splitter returns the end of the piece that starts at i (> i) in s,
// which is valid UTF-8.
type splitter func(s string, i int) int

func (p Pattern) splitter() splitter {
	switch p {
	case PatternGPT2:
		return splitGPT2
	case PatternCL100k:
		return func(s string, i int) int { return splitCL100k(s, i, 3) }
	case PatternQwen2:
		return func(s string, i int) int { return splitCL100k(s, i, 1) }
	case PatternO200k:
		return splitO200k
	}
	return func(s string, _ int) int { return len(s) }
}

// Character classes, as bits.
const (
	cL    uint8 = 1 << iota // \p{L}
	cN                      // \p{N}
	cS                      // \s: White_Space
	cU                      // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	cW                      // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	cCRLF                   // \r or \n
)

var (
	bmpOnce  sync.Once
	bmpClass []uint8 // the class of every rune below 0x10000
)

//go:generate sh -c "node gen_unicode.mjs $(bash ../../../.ci/tokref/install.sh) > unicode16.go"

// classify is r's classes in Unicode 16.0.0, the version the references'
// regex engines use (unicode16.go; Go's unicode package is 15.0.0, and
// letters added since would split differently).
func classify(r rune) uint8 {
	var c uint8
	if unicode.Is(ucdLetter, r) {
		c |= cL
	}
	if unicode.Is(ucdNumber, r) {
		c |= cN
	}
	if unicode.Is(ucdSpace, r) { // White_Space, as \s in Rust's regex and Oniguruma
		c |= cS
	}
	if unicode.Is(ucdUpperish, r) {
		c |= cU
	}
	if unicode.Is(ucdLowerish, r) {
		c |= cW
	}
	if r == '\r' || r == '\n' {
		c |= cCRLF
	}
	return c
}

func classTable() []uint8 {
	bmpOnce.Do(func() {
		t := make([]uint8, 0x10000)
		for r := range t {
			t[r] = classify(rune(r))
		}
		bmpClass = t
	})
	return bmpClass
}

// at is the class and size of the rune at s[i].
func at(tab []uint8, s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return tab[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return tab[r], n
	}
	return classify(r), n
}

// run is the end of the run of runes from i whose class has a bit of want.
func run(tab []uint8, s string, i int, want uint8) int {
	for i < len(s) {
		c, n := at(tab, s, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// runOther is the end of the run of runes from i that are not \s, \p{L}, \p{N}.
func runOther(tab []uint8, s string, i int) int {
	for i < len(s) {
		c, n := at(tab, s, i)
		if c&(cL|cN|cS) != 0 {
			break
		}
		i += n
	}
	return i
}

// contraction is the length of 's, 't, 're, 've, 'm, 'll or 'd at s[i]
// (the apostrophe included), 0 if none. Folded matches S, T, ... and ſ
// (U+017F, which case-folds to s) as the (?i:...) of the newer patterns do.
func contraction(s string, i int, folded bool) int {
	if i >= len(s) || s[i] != '\'' || i+1 >= len(s) {
		return 0
	}
	c := s[i+1]
	if folded && c >= 'A' && c <= 'Z' {
		c += 'a' - 'A'
	}
	switch c {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v', 'l':
		if i+2 >= len(s) {
			return 0
		}
		want := byte('e')
		if c == 'l' {
			want = 'l'
		}
		d := s[i+2]
		if folded && d >= 'A' && d <= 'Z' {
			d += 'a' - 'A'
		}
		if d == want {
			return 3
		}
	case 0xC5: // ſ is C5 BF
		if folded && i+2 < len(s) && s[i+2] == 0xBF {
			return 3
		}
	}
	return 0
}

// whitespace ends a piece that starts with whitespace at i: \s+(?!\S)
// then \s+, after \s*[\r\n]+ when crlf is set.
func whitespace(tab []uint8, s string, i int, crlf bool) int {
	j := run(tab, s, i, cS)
	if crlf {
		// \s*[\r\n]+: up to the last \r or \n of the run, if it has one.
		for k := j - 1; k >= i; k-- {
			if s[k] == '\r' || s[k] == '\n' {
				return k + 1
			}
		}
	}
	if j == len(s) {
		return j
	}
	// \s+(?!\S): all but the last, which goes with what follows; \s+ if
	// that leaves nothing.
	_, last := lastRune(s[i:j])
	if j-last > i {
		return j - last
	}
	return j
}

func lastRune(s string) (rune, int) { return utf8.DecodeLastRuneInString(s) }

// splitGPT2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func splitGPT2(s string, i int) int {
	tab := classTable()
	if m := contraction(s, i, false); m > 0 {
		return i + m
	}
	p := i
	if s[i] == ' ' {
		p++
	}
	if p < len(s) {
		c, _ := at(tab, s, p)
		switch {
		case c&cL != 0:
			return run(tab, s, p, cL)
		case c&cN != 0:
			return run(tab, s, p, cN)
		case c&cS == 0:
			return runOther(tab, s, p)
		}
	}
	return whitespace(tab, s, i, false)
}

// splitCL100k: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ (digits \p{N} for Qwen2).
func splitCL100k(s string, i int, digits int) int {
	tab := classTable()
	if m := contraction(s, i, true); m > 0 {
		return i + m
	}
	c, n := at(tab, s, i)
	if c&cL != 0 {
		return run(tab, s, i, cL)
	}
	if c&(cN|cCRLF) == 0 && i+n < len(s) {
		if c2, _ := at(tab, s, i+n); c2&cL != 0 {
			return run(tab, s, i+n, cL)
		}
	}
	if c&cN != 0 {
		return numbers(tab, s, i, digits)
	}
	if j, ok := punctuation(tab, s, i, "\r\n"); ok {
		return j
	}
	return whitespace(tab, s, i, true)
}

// splitO200k: [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|...)?
// |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?
// |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitO200k(s string, i int) int {
	tab := classTable()
	c, n := at(tab, s, i)
	prefix := c&(cL|cN|cCRLF) == 0 && i+n < len(s)
	// The first two alternatives, each with the optional prefix first.
	for _, word := range [2]func([]uint8, string, int) int{o200kLowerWord, o200kUpperWord} {
		if prefix {
			if e := word(tab, s, i+n); e >= 0 {
				return e
			}
		}
		if e := word(tab, s, i); e >= 0 {
			return e
		}
	}
	if c&cN != 0 {
		return numbers(tab, s, i, 3)
	}
	if j, ok := punctuation(tab, s, i, "\r\n/"); ok {
		return j
	}
	return whitespace(tab, s, i, true)
}

// numbers matches \p{N}{1,most} at i (a number there).
func numbers(tab []uint8, s string, i, most int) int {
	j := i
	for k := 0; k < most && j < len(s); k++ {
		cj, nj := at(tab, s, j)
		if cj&cN == 0 {
			break
		}
		j += nj
	}
	return j
}

// punctuation matches " ?[^\s\p{L}\p{N}]+[trail]*" at i, where trail's
// bytes are ASCII.
func punctuation(tab []uint8, s string, i int, trail string) (int, bool) {
	p := i
	if s[i] == ' ' {
		p++
	}
	if p >= len(s) {
		return 0, false
	}
	if cp, _ := at(tab, s, p); cp&(cL|cN|cS) != 0 {
		return 0, false
	}
	j := runOther(tab, s, p)
	for j < len(s) && strings.IndexByte(trail, s[j]) >= 0 {
		j++
	}
	return j, true
}

// o200kLowerWord matches U*W+ then an optional contraction at p, or -1.
// U* is greedy and gives back runes until W+ can match: the match ends
// after the W run that follows the U run, or else just after the last
// rune of the U run that is also in W.
func o200kLowerWord(tab []uint8, s string, p int) int {
	q, lastW := p, -1
	for q < len(s) {
		c, n := at(tab, s, q)
		if c&cU == 0 {
			break
		}
		q += n
		if c&cW != 0 {
			lastW = q
		}
	}
	end := -1
	if q < len(s) {
		if c, _ := at(tab, s, q); c&cW != 0 {
			end = run(tab, s, q, cW)
		}
	}
	if end < 0 {
		if lastW < 0 {
			return -1
		}
		end = lastW
	}
	return end + contraction(s, end, true)
}

// o200kUpperWord matches U+W* then an optional contraction at p, or -1.
func o200kUpperWord(tab []uint8, s string, p int) int {
	q := run(tab, s, p, cU)
	if q == p {
		return -1
	}
	end := run(tab, s, q, cW)
	return end + contraction(s, end, true)
}
