package bpe

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A tokenizer.json's vocab and merges (Llama 3's: 128,000 tokens and
// 280,147 merges, 8 of its 9 MB) are read by the scanner here, and the
// rest of the file, with those two cut out, by encoding/json: its
// reflection into a map and a []json.RawMessage unmarshalled one by one,
// and the garbage, were most of LoadHF's 0.45 CPU-seconds, which every
// replica and job submit spend, and it read the file twice (once to check
// it). The scanner takes only what those two hold, and JSON only: strings
// without escapes are slices of the text, and any other string (an
// escape, invalid UTF-8, which encoding/json replaces) is encoding/json's
// to read, so that both read every token alike.

// jsonScan reads JSON text.
type jsonScan struct {
	s string
	i int
}

// next is the next byte after white space, or 0 at the end.
func (j *jsonScan) next() byte {
	for ; j.i < len(j.s); j.i++ {
		switch c := j.s[j.i]; c {
		case ' ', '\t', '\n', '\r':
		default:
			return c
		}
	}
	return 0
}

// eat consumes c if it is the next byte.
func (j *jsonScan) eat(c byte) bool {
	if j.next() != c {
		return false
	}
	j.i++
	return true
}

// str reads a string, if one is next.
func (j *jsonScan) str() (string, bool) {
	if j.next() != '"' {
		return "", false
	}
	start, ascii := j.i+1, true
	for k := start; k < len(j.s); k++ {
		switch c := j.s[k]; {
		case c == '"':
			s := j.s[start:k]
			if !ascii && !utf8.ValidString(s) {
				return j.slowStr(k + 1)
			}
			j.i = k + 1
			return s, true
		case c == '\\': // an escape: to the closing quote, then encoding/json
			for ; k < len(j.s); k++ {
				if j.s[k] == '\\' {
					k++
				} else if j.s[k] == '"' {
					return j.slowStr(k + 1)
				}
			}
			return "", false
		case c < ' ': // not JSON: encoding/json says so
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// slowStr reads the string literal that ends before end with encoding/json.
func (j *jsonScan) slowStr(end int) (string, bool) {
	var s string
	if end > len(j.s) || json.Unmarshal([]byte(j.s[j.i:end]), &s) != nil {
		return "", false
	}
	j.i = end
	return s, true
}

// integer reads a number, and whether it is an integer in int64.
func (j *jsonScan) integer() (n int64, text string, ok bool) {
	j.next()
	start := j.i
	for ; j.i < len(j.s); j.i++ {
		if c := j.s[j.i]; (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
			break
		}
	}
	text = j.s[start:j.i]
	if text == "" {
		return 0, clip(j.s[start:], 10), false
	}
	digits := strings.TrimPrefix(text, "-")
	if len(digits) > 1 && digits[0] == '0' { // not JSON, nor are + and a lone -
		return 0, text, false
	}
	n, err := strconv.ParseInt(text, 10, 64)
	return n, text, err == nil && text[0] != '+'
}

// object reads an object, calling member with each key, the scanner at its
// value, which member reads; false if the text is not an object or member
// returns false.
func (j *jsonScan) object(member func(key string) bool) bool {
	if !j.eat('{') {
		return false
	}
	if j.eat('}') {
		return true
	}
	for {
		k, ok := j.str()
		if !ok || !j.eat(':') || !member(k) {
			return false
		}
		if !j.eat(',') {
			return j.eat('}')
		}
	}
}

// array reads an array as object reads an object, element reading each.
func (j *jsonScan) array(element func(i int) bool) bool {
	if !j.eat('[') {
		return false
	}
	if j.eat(']') {
		return true
	}
	for i := 0; ; i++ {
		if !element(i) {
			return false
		}
		if !j.eat(',') {
			return j.eat(']')
		}
	}
}

// end reports whether only white space is left.
func (j *jsonScan) end() bool { return j.next() == 0 }

func isNullText(s string) bool {
	s = strings.TrimSpace(s)
	return s == "" || s == "null"
}

type vocabEntry struct {
	s  string
	id int32
}

// scanVocab reads the vocab, an object of tokens and their ids, checking
// their bounds.
func scanVocab(text string) ([]vocabEntry, error) {
	if isNullText(text) {
		return nil, nil
	}
	v := make([]vocabEntry, 0, len(text)/16) // Llama 3's take 19.5 bytes each
	var err error
	j := jsonScan{s: text}
	ok := j.object(func(s string) bool {
		id, num, ok := j.integer()
		switch {
		case !ok:
			err = fmt.Errorf("model BPE: token %q has id %s, not an integer", clip(s, 40), num)
		case id < 0 || id >= MaxVocab:
			err = fmt.Errorf("model BPE: token %q has id %d, outside 0..%d", clip(s, 40), id, MaxVocab-1)
		case len(s) > MaxTokenBytes:
			err = fmt.Errorf("model BPE: a token of %d bytes, over the limit of %d", len(s), MaxTokenBytes)
		case len(v) == MaxVocab:
			err = fmt.Errorf("model BPE: over %d vocab entries, the limit", MaxVocab)
		default:
			v = append(v, vocabEntry{s, int32(id)})
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	if !ok || !j.end() {
		return nil, fmt.Errorf("model BPE: vocab: want an object of tokens and their ids")
	}
	return v, nil
}

// scanMerges calls each with every merge in turn, "a b" or [a, b], its
// index the rank; at most MaxMerges.
func scanMerges(text string, each func(i int, a, b string) error) error {
	if isNullText(text) {
		return nil
	}
	var err error
	j := jsonScan{s: text}
	ok := j.array(func(i int) bool {
		if i == MaxMerges {
			err = fmt.Errorf("model BPE: over %d merges, the limit", MaxMerges)
			return false
		}
		var a, b string
		if s, ok := j.str(); ok {
			var found bool
			if a, b, found = strings.Cut(s, " "); !found || strings.Contains(b, " ") {
				err = fmt.Errorf("model BPE: merges[%d]: %q: want two tokens separated by a space", i, clip(s, 80))
				return false
			}
		} else {
			var pair [2]string
			n := 0
			if !j.array(func(k int) bool {
				if k >= 2 {
					return false
				}
				var ok bool
				pair[k], ok = j.str()
				n++
				return ok
			}) || n != 2 {
				err = fmt.Errorf("model BPE: merges[%d]: want \"a b\" or [a, b]", i)
				return false
			}
			a, b = pair[0], pair[1]
		}
		err = each(i, a, b)
		return err == nil
	})
	if err != nil {
		return err
	}
	if !ok || !j.end() {
		return fmt.Errorf("model BPE: merges: want an array")
	}
	return nil
}

// cutVocabAndMerges finds the values of model.vocab and model.merges in a
// tokenizer.json and gives the file with them replaced by null, for
// encoding/json to read the rest as before, which is then a few kilobytes.
// ok is false, and nothing cut, where the file is not an object holding
// one model object with one vocab and one merges: then encoding/json reads
// it all, and says what is wrong.
func cutVocabAndMerges(text string) (rest []byte, vocab, merges string, ok bool) {
	j := jsonScan{s: text}
	var spans [][2]int
	models := 0
	ok = j.object(func(k string) bool {
		if k != "model" {
			return j.skip()
		}
		models++
		return j.object(func(mk string) bool {
			j.next()
			start := j.i
			if !j.skip() {
				return false
			}
			switch mk {
			case "vocab":
				vocab = text[start:j.i]
			case "merges":
				merges = text[start:j.i]
			default:
				return true
			}
			spans = append(spans, [2]int{start, j.i})
			return true
		})
	})
	if !ok || !j.end() || models != 1 || len(spans) != 2 {
		return nil, "", "", false
	}
	if spans[0][0] > spans[1][0] {
		spans[0], spans[1] = spans[1], spans[0]
	}
	rest = make([]byte, 0, len(text)-(spans[0][1]-spans[0][0])-(spans[1][1]-spans[1][0])+8)
	rest = append(rest, text[:spans[0][0]]...)
	rest = append(rest, "null"...)
	rest = append(rest, text[spans[0][1]:spans[1][0]]...)
	rest = append(rest, "null"...)
	rest = append(rest, text[spans[1][1]:]...)
	return rest, vocab, merges, true
}

// delim is the bytes that end a number or literal.
var delim = func() (d [256]bool) {
	for _, c := range []byte(" \t\r\n,:[]{}\"") {
		d[c] = true
	}
	return d
}()

// skip moves past the next value, reporting whether its brackets and
// strings close. It checks no more: encoding/json reads what it skips.
func (j *jsonScan) skip() bool {
	for depth := 0; ; {
		switch c := j.next(); c {
		case 0:
			return false
		case '"':
			k := j.i + 1
			for ; k < len(j.s) && j.s[k] != '"'; k++ {
				if j.s[k] == '\\' {
					k++
				}
			}
			if k >= len(j.s) {
				return false
			}
			j.i = k + 1
		case '{', '[':
			depth++
			j.i++
		case '}', ']', ',', ':':
			if depth == 0 {
				return false
			}
			if c == '}' || c == ']' {
				depth--
			}
			j.i++
		default: // a number, true, false or null
			for j.i < len(j.s) && !delim[j.s[j.i]] {
				j.i++
			}
		}
		if depth == 0 {
			return true
		}
	}
}
