package text

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of ASCII bytes, for the fast path.
const (
	asciiWord  = iota // part of a word
	asciiUpper        // part of a word, lowercased when asked
	asciiSpace        // separates words
	asciiPunct        // a word of its own
	asciiDrop         // control character: removed
)

// asciiClass follows BERT: tab, newline, CR and space are whitespace, the
// other C0 controls and DEL are dropped, and every printable
// non-alphanumeric ASCII character is punctuation.
var asciiClass = func() (c [utf8.RuneSelf]uint8) {
	for b := range c {
		switch {
		case b == ' ' || b == '\t' || b == '\n' || b == '\r':
			c[b] = asciiSpace
		case b < ' ' || b == 0x7f:
			c[b] = asciiDrop
		case b >= 'A' && b <= 'Z':
			c[b] = asciiUpper
		case b >= 'a' && b <= 'z' || b >= '0' && b <= '9':
			c[b] = asciiWord
		default:
			c[b] = asciiPunct
		}
	}
	return c
}()

// AppendTokens appends the ids of text's WordPiece tokens to dst.
func (t *Tokenizer) AppendTokens(dst []int32, text string) []int32 {
	s := t.scratch.Get().(*scratch)
	defer t.scratch.Put(s)
	w := s.word[:0]
	for i := 0; i < len(text); {
		if c := text[i]; c < utf8.RuneSelf {
			i++
			switch asciiClass[c] {
			case asciiDrop:
				continue
			case asciiSpace:
				dst, w = t.flush(dst, w, s)
				continue
			case asciiPunct:
				dst, w = t.flush(dst, w, s)
				if id := t.ascii[c]; id >= 0 {
					dst = append(dst, id)
				} else {
					dst = append(dst, t.unk)
				}
				continue
			case asciiUpper:
				if t.o.Lowercase {
					c += 'a' - 'A'
				}
			}
			w = append(w, c)
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		switch {
		case r == utf8.RuneError || unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs):
			continue // invalid UTF-8 lands here too, as U+FFFD
		case unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp):
			dst, w = t.flush(dst, w, s)
			continue
		case isCJK(r):
			dst, w = t.flush(dst, w, s)
			dst = t.char(dst, r, s)
			continue
		}
		if t.o.Lowercase {
			r = unicode.ToLower(r)
		}
		if t.o.StripAccents {
			if unicode.Is(unicode.Mn, r) {
				continue
			}
			if b, ok := accentBase[r]; ok {
				r = b
			}
		}
		if unicode.IsPunct(r) {
			dst, w = t.flush(dst, w, s)
			dst = t.char(dst, r, s)
			continue
		}
		w = utf8.AppendRune(w, r)
	}
	dst, w = t.flush(dst, w, s)
	s.word = w
	return dst
}

// isCJK reports CJK Unified Ideographs (and extensions and compatibility
// ideographs), the blocks BERT splits into single characters. Hangul,
// Hiragana and Katakana are not among them, as in BERT.
func isCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF ||
		r >= 0x3400 && r <= 0x4DBF ||
		r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F ||
		r >= 0x2B740 && r <= 0x2B81F ||
		r >= 0x2B820 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF ||
		r >= 0x2F800 && r <= 0x2FA1F
}
