package pipeline

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// One field of a sample's JSON object without decoding the whole object
// into a map: a JSONL document is mostly one long string, and decoding it
// as map[string]json.RawMessage and then the field again as a string made
// encoding/json's scanner pass over it four times. jsonField validates the
// line and finds the field in one strict pass; anything it is not sure of
// (a key with escapes, a duplicate of the field, deep nesting, invalid
// JSON) it leaves to jsonObject, whose result or error then stands.

// jsonField is the raw value of field in the sample's JSON member (the
// first of members it has), as jsonObject's map would hold it. ok is false
// where the caller must take jsonObject's path instead: no such member,
// the member already parsed into st.json, or a line the scan cannot vouch
// for. found is false (with ok) when the object, valid, has no such field.
func (st *state) jsonField(members []string, field string) (raw []byte, member string, found, ok bool) {
	for _, m := range members {
		b, has := st.sample.Files[m]
		if !has {
			continue
		}
		if st.json != nil && st.jsonMember == m {
			return nil, m, false, false // the map is there: use it
		}
		raw, found, ok = scanField(bytes.TrimSpace(b), field)
		return raw, m, found, ok
	}
	return nil, "", false, false
}

// maxScanDepth bounds the nesting scanField follows; deeper lines go to
// encoding/json (whose own limit is 10,000).
const maxScanDepth = 100

// scanField finds the value of the top-level key field in b, which must
// be one JSON object and nothing else. ok is false when b is not valid
// JSON, or is but not in the simple form whose result is plain to see: a
// key with escapes or invalid UTF-8 (its decoded form could be field), or
// field twice (encoding/json keeps the last; left to it).
func scanField(b []byte, field string) (raw []byte, found, ok bool) {
	s := jsonScan{b: b}
	s.ws()
	if !s.eat('{') {
		return nil, false, false
	}
	s.ws()
	if s.eat('}') {
		s.ws()
		return nil, false, s.i == len(b)
	}
	for {
		k0 := s.i
		if !s.str() {
			return nil, false, false
		}
		key := b[k0+1 : s.i-1]
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			return nil, false, false
		}
		s.ws()
		if !s.eat(':') {
			return nil, false, false
		}
		s.ws()
		v0 := s.i
		if !s.value(1) {
			return nil, false, false
		}
		if string(key) == field {
			if found {
				return nil, false, false
			}
			raw, found = b[v0:s.i], true
		}
		s.ws()
		if s.eat(',') {
			s.ws()
			continue
		}
		if !s.eat('}') {
			return nil, false, false
		}
		s.ws()
		return raw, found, s.i == len(b)
	}
}

// jsonScan checks JSON as RFC 8259 (and encoding/json) defines it.
type jsonScan struct {
	b []byte
	i int
}

func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScan) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// value passes one value at s.i, inside depth containers.
func (s *jsonScan) value(depth int) bool {
	if s.i >= len(s.b) || depth > maxScanDepth {
		return false
	}
	switch c := s.b[s.i]; c {
	case '"':
		return s.str()
	case '{', '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.i++
		s.ws()
		if s.eat(end) {
			return true
		}
		for {
			if c == '{' {
				if !s.str() {
					return false
				}
				s.ws()
				if !s.eat(':') {
					return false
				}
				s.ws()
			}
			if !s.value(depth + 1) {
				return false
			}
			s.ws()
			if s.eat(',') {
				s.ws()
				continue
			}
			return s.eat(end)
		}
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	}
	return s.num()
}

func (s *jsonScan) lit(l string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(l)) {
		s.i += len(l)
		return true
	}
	return false
}

// num passes -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?; what
// follows it is the caller's to check.
func (s *jsonScan) num() bool {
	b, i := s.b, s.i
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
	s.i = i
	return true
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// strByte marks the bytes a string holds as they are: all but the quote,
// the backslash and control characters (which JSON wants escaped).
var strByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str passes a string at s.i, quotes included. Invalid UTF-8 is allowed:
// encoding/json takes it (and decodes it as U+FFFD).
func (s *jsonScan) str() bool {
	b, i := s.b, s.i
	if i >= len(b) || b[i] != '"' {
		return false
	}
	i++
	for {
		for i < len(b) && strByte[b[i]] {
			i++
		}
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '"':
			s.i = i + 1
			return true
		case '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hex4(b[i+2:i+6]) < 0 {
					return false
				}
				i += 6
			default:
				return false
			}
		default: // a control character
			return false
		}
	}
}

// hex4 is the value of 4 hex digits, or -1.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
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

// unquote decodes the inside of a string str passed, as encoding/json
// does: escapes decoded, a \u escape of a lone surrogate and each byte of
// invalid UTF-8 made U+FFFD.
func unquote(s []byte) string {
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
