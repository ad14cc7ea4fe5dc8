// Package jsonscan reads JSON text in place, as RFC 8259 and
// encoding/json define it, without decoding it into values: for the few
// hot readers that want one part of a document (a tokenizer.json's vocab,
// one field of a JSONL line) and leave anything unusual to encoding/json.
//
// A Scanner is an offset into a string or a []byte; its methods pass one
// piece of JSON at the offset, reporting whether it was there and valid,
// and move past it. Invalid UTF-8 in a string is allowed, as encoding/json
// allows it (decoding each bad byte as U+FFFD, as Unquote does).
package jsonscan

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting Value follows; deeper text is refused
// (encoding/json's own limit is 10,000), for the caller to give to
// encoding/json.
const MaxDepth = 100

// Scanner reads the JSON text S from offset I.
type Scanner[T string | []byte] struct {
	S T   // the text
	I int // the offset of the next byte to read
}

// SkipSpace moves past white space.
func (s *Scanner[T]) SkipSpace() {
	for s.I < len(s.S) {
		switch s.S[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Next moves past white space and is the byte there, or 0 at the end.
func (s *Scanner[T]) Next() byte {
	s.SkipSpace()
	if s.I < len(s.S) {
		return s.S[s.I]
	}
	return 0
}

// Eat consumes c if it is the byte at I.
func (s *Scanner[T]) Eat(c byte) bool {
	if s.I < len(s.S) && s.S[s.I] == c {
		s.I++
		return true
	}
	return false
}

// Str is what a string holds besides plain ASCII, as flags.
type Str uint8

const (
	Escaped  Str = 1 << iota // a \ escape
	NonASCII                 // a byte over 0x7f, maybe not valid UTF-8
)

// Byte classes in a string: plain ASCII, other bytes a string holds as
// they are, and the quote, the backslash and the control characters
// (which JSON wants escaped).
const (
	plain = iota
	high
	special
)

var strClass = func() (t [256]uint8) {
	for c := range 256 {
		switch {
		case c < 0x20 || c == '"' || c == '\\':
			t[c] = special
		case c >= utf8.RuneSelf:
			t[c] = high
		}
	}
	return t
}()

// Str passes a string at I, quotes included, and reports what it holds;
// ok is false where none is there or it is not JSON.
func (s *Scanner[T]) Str() (kind Str, ok bool) {
	b, i := s.S, s.I
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	i++
	for {
		if kind&NonASCII == 0 {
			for i < len(b) && strClass[b[i]] == plain {
				i++
			}
		} else { // known: pass the other bytes a string holds too
			for i < len(b) && strClass[b[i]] != special {
				i++
			}
		}
		if i >= len(b) {
			return 0, false
		}
		switch c := b[i]; {
		case c == '"':
			s.I = i + 1
			return kind, true
		case c == '\\':
			if i+1 >= len(b) {
				return 0, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hex4(b[i+2:i+6]) < 0 {
					return 0, false
				}
				i += 6
			default:
				return 0, false
			}
			kind |= Escaped
		case c >= utf8.RuneSelf:
			kind |= NonASCII
		default: // a control character
			return 0, false
		}
	}
}

// Num passes a number at I, -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?;
// what follows it is the caller's to check.
func (s *Scanner[T]) Num() bool {
	b, i := s.S, s.I
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	s.I = i
	return true
}

func digits[T string | []byte](b T, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// Lit passes the literal l (true, false or null) if it is at I.
func (s *Scanner[T]) Lit(l string) bool {
	if len(s.S)-s.I >= len(l) && string(s.S[s.I:s.I+len(l)]) == l {
		s.I += len(l)
		return true
	}
	return false
}

// Value passes one value at I (white space before it is the caller's),
// checking all of it, at most MaxDepth containers deep.
func (s *Scanner[T]) Value() bool { return s.value(1) }

// value passes one value at I, inside depth containers.
func (s *Scanner[T]) value(depth int) bool {
	if s.I >= len(s.S) || depth > MaxDepth {
		return false
	}
	switch c := s.S[s.I]; c {
	case '"':
		_, ok := s.Str()
		return ok
	case '{', '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.I++
		s.SkipSpace()
		if s.Eat(end) {
			return true
		}
		for {
			if c == '{' {
				if _, ok := s.Str(); !ok {
					return false
				}
				s.SkipSpace()
				if !s.Eat(':') {
					return false
				}
				s.SkipSpace()
			}
			if !s.value(depth + 1) {
				return false
			}
			s.SkipSpace()
			if s.Eat(',') {
				s.SkipSpace()
				continue
			}
			return s.Eat(end)
		}
	case 't':
		return s.Lit("true")
	case 'f':
		return s.Lit("false")
	case 'n':
		return s.Lit("null")
	}
	return s.Num()
}

// Object passes an object after white space, calling member with each
// key (its inside, quotes cut, and what Str found in it) and I at its
// value, after white space, which member passes. It is false where the
// text is not an object or member returns false; white space after the
// object is the caller's.
func (s *Scanner[T]) Object(member func(key T, kind Str) bool) bool {
	s.SkipSpace()
	if !s.Eat('{') {
		return false
	}
	s.SkipSpace()
	if s.Eat('}') {
		return true
	}
	for {
		k0 := s.I
		kind, ok := s.Str()
		if !ok {
			return false
		}
		key := s.S[k0+1 : s.I-1]
		s.SkipSpace()
		if !s.Eat(':') {
			return false
		}
		s.SkipSpace()
		if !member(key, kind) {
			return false
		}
		s.SkipSpace()
		if s.Eat(',') {
			s.SkipSpace()
			continue
		}
		return s.Eat('}')
	}
}

// Array passes an array as Object passes an object, element passing
// each element, numbered from 0.
func (s *Scanner[T]) Array(element func(i int) bool) bool {
	s.SkipSpace()
	if !s.Eat('[') {
		return false
	}
	s.SkipSpace()
	if s.Eat(']') {
		return true
	}
	for i := 0; ; i++ {
		if !element(i) {
			return false
		}
		s.SkipSpace()
		if s.Eat(',') {
			s.SkipSpace()
			continue
		}
		return s.Eat(']')
	}
}

// hex4 is the value of 4 hex digits, or -1.
func hex4[T string | []byte](b T) rune {
	var r rune
	for i := range 4 {
		c := b[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// Unquote decodes the inside of a string Str passed, as encoding/json
// does: escapes decoded, a \u escape of a lone surrogate and each byte of
// invalid UTF-8 made U+FFFD.
func Unquote(s []byte) string {
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return string(s) // the usual short text
	}
	var w strings.Builder
	w.Grow(len(s))
	for len(s) > 0 {
		n := bytes.IndexByte(s, '\\')
		if n < 0 {
			n = len(s)
		}
		writeUTF8(&w, s[:n])
		if s = s[n:]; len(s) == 0 {
			break
		}
		c := s[1]
		if c != 'u' {
			w.WriteByte(unescape[c])
			s = s[2:]
			continue
		}
		r := hex4(s[2:6])
		s = s[6:]
		if utf16.IsSurrogate(r) {
			r2 := rune(-1)
			if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
				r2 = hex4(s[2:6])
			}
			if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
				r, s = d, s[6:] // a pair
			} else {
				r = utf8.RuneError // alone; what follows is decoded apart
			}
		}
		w.WriteRune(r)
	}
	return w.String()
}

var unescape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// writeUTF8 writes b with each byte of invalid UTF-8 made U+FFFD.
func writeUTF8(w *strings.Builder, b []byte) {
	if utf8.Valid(b) {
		w.Write(b)
		return
	}
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			w.WriteRune(r)
		} else {
			w.Write(b[:n])
		}
		b = b[n:]
	}
}
