package bpe

import (
	"strings"
	"unicode/utf8"
)

// validUTF8 returns s with each maximal subpart of an ill-formed UTF-8
// sequence replaced by one U+FFFD, as the WHATWG Encoding Standard's UTF-8
// decoder (JavaScript's TextDecoder, Node's Buffer.toString) and Python's
// bytes.decode(errors="replace") do. Neither reference takes bytes: Hugging
// Face tokenizers and tiktoken take a str (Rust &str), so invalid UTF-8
// reaches them only through such a decode, and this is it. (Go's
// strings.ToValidUTF8 folds a run of bad bytes into one U+FFFD instead,
// and ranging over a string gives one per byte: both differ.)
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			b.WriteByte(c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || size != 1 {
			b.WriteString(s[i : i+size])
			i += size
			continue
		}
		b.WriteString("\uFFFD")
		i += maximalSubpart(s[i:])
	}
	return b.String()
}

// maximalSubpart is the length of the ill-formed sequence at the start of
// s: its lead byte and the continuation bytes that could still have
// completed it (Unicode 3.9, "U+FFFD Substitution of Maximal Subparts").
func maximalSubpart(s string) int {
	c := s[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // the second byte's range
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(s); k++ {
		b := s[n]
		if k > 0 {
			lo, hi = 0x80, 0xBF
		}
		if b < lo || b > hi {
			break
		}
		n++
	}
	return n
}
