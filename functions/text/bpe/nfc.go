package bpe

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
	"golang.org/x/text/unicode/rangetable"
)

// unicode9 is what Hugging Face tokenizers' NFC knows: its normalization
// tables (the unicode-normalization-alignments crate) are Unicode 9.0, so
// a character assigned since is, to it, an unknown starter that neither
// decomposes, composes nor reorders (U+0D3C, ccc 9 since Unicode 10, stays
// after a U+0301 that standard NFC puts it before).
var unicode9 = rangetable.Assigned("9.0.0")

// nfcAsTokenizers is NFC as Hugging Face tokenizers computes it: standard
// NFC (Go's tables, which agree with Unicode 9.0 on every character 9.0
// has) of the runs between characters newer than 9.0, which stay as they
// are. Text that is NFC by today's tables is NFC by 9.0's too.
func nfcAsTokenizers(s string) string {
	if norm.NFC.IsNormalString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r >= 0x80 && !unicode.Is(unicode9, r) {
			b.WriteString(norm.NFC.String(s[start:i]))
			b.WriteString(s[i : i+n])
			start = i + n
		}
		i += n
	}
	b.WriteString(norm.NFC.String(s[start:]))
	return b.String()
}
