package bpe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-project/sluice/internal/jsonscan"
)

// A tokenizer.json's vocab and merges (Llama 3's: 128,000 tokens and
// 280,147 merges, 8 of its 9 MB) are read by the scanner here, and the
// rest of the file, with those two cut out, by encoding/json: its
// reflection into a map and a []json.RawMessage unmarshalled one by one,
// and the garbage, were most of LoadHF's 0.45 CPU-seconds, which every
// replica and job submit spend, and it read the file twice (once to check
// it). The scanner (internal/jsonscan's) takes only what those two hold,
// and JSON only: strings without escapes are slices of the text, and any
// other string (an escape, invalid UTF-8) is decoded by jsonscan.Unquote
// as encoding/json decodes it (U+FFFD for each bad byte), so that both
// read every token alike. The skip that cuts the two out only matches
// brackets: encoding/json checks what it skips, and says what is wrong.

// jsonScan reads JSON text with jsonscan's strict scanner, and the
// loose skip, integer and end below.
type jsonScan struct{ jsonscan.Scanner[string] }

// str reads a string, after white space, if one is next: a slice of the
// text where it has no escape and is valid UTF-8, else decoded as
// encoding/json would (jsonscan.Unquote).
func (j *jsonScan) str() (string, bool) {
	if j.Next() != '"' {
		return "", false
	}
	start := j.I
	kind, ok := j.Str()
	if !ok {
		return "", false
	}
	return strValue(j.S[start+1:j.I-1], kind), true
}

// strValue is the value of the string whose inside is s.
func strValue(s string, kind jsonscan.Str) string {
	if kind&jsonscan.Escaped != 0 || kind&jsonscan.NonASCII != 0 && !utf8.ValidString(s) {
		return jsonscan.Unquote([]byte(s))
	}
	return s
}

// numByte marks the bytes integer takes into the text of a number, JSON
// or not, for its message.
var numByte = func() (t [256]bool) {
	for _, c := range []byte("0123456789+-.eE") {
		t[c] = true
	}
	return t
}()

// integer reads a number, and whether it is an integer in int64.
func (j *jsonScan) integer() (n int64, text string, ok bool) {
	j.Next()
	start := j.I
	for j.I < len(j.S) && numByte[j.S[j.I]] {
		j.I++
	}
	text = j.S[start:j.I]
	if text == "" {
		return 0, clip(j.S[start:], 10), false
	}
	num := jsonscan.Scanner[string]{S: text} // JSON's form: no +, no leading 0
	n, err := strconv.ParseInt(text, 10, 64)
	return n, text, err == nil && num.Num() && num.I == len(text)
}

// object reads an object, calling member with each key, the scanner at its
// value, which member reads; false if the text is not an object or member
// returns false.
func (j *jsonScan) object(member func(key string) bool) bool {
	return j.Object(func(key string, kind jsonscan.Str) bool { return member(strValue(key, kind)) })
}

// end reports whether only white space is left (or a NUL byte, which
// encoding/json then refuses).
func (j *jsonScan) end() bool { return j.Next() == 0 }

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
	j := jsonScan{jsonscan.Scanner[string]{S: text}}
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
	j := jsonScan{jsonscan.Scanner[string]{S: text}}
	ok := j.Array(func(i int) bool {
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
			if !j.Array(func(k int) bool {
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
	j := jsonScan{jsonscan.Scanner[string]{S: text}}
	var spans [][2]int
	models := 0
	ok = j.object(func(k string) bool {
		if k != "model" {
			return j.skip()
		}
		models++
		return j.object(func(mk string) bool {
			j.Next()
			start := j.I
			if !j.skip() {
				return false
			}
			switch mk {
			case "vocab":
				vocab = text[start:j.I]
			case "merges":
				merges = text[start:j.I]
			default:
				return true
			}
			spans = append(spans, [2]int{start, j.I})
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
		switch c := j.Next(); c {
		case 0:
			return false
		case '"':
			k := j.I + 1
			for ; k < len(j.S) && j.S[k] != '"'; k++ {
				if j.S[k] == '\\' {
					k++
				}
			}
			if k >= len(j.S) {
				return false
			}
			j.I = k + 1
		case '{', '[':
			depth++
			j.I++
		case '}', ']', ',', ':':
			if depth == 0 {
				return false
			}
			if c == '}' || c == ']' {
				depth--
			}
			j.I++
		default: // a number, true, false or null
			for j.I < len(j.S) && !delim[j.S[j.I]] {
				j.I++
			}
		}
		if depth == 0 {
			return true
		}
	}
}
