package bpe

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// The scanner reads every token as encoding/json does: escapes, quotes,
// backslashes, control characters, non-ASCII and invalid UTF-8 (which
// encoding/json reads as U+FFFD), written escaped and raw.
func TestScanVocabReadsAsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	parts := []string{"a", "Ġ", "\"", "\\", "/", "\n", "\t", "\x01", "\x7f", "é", "日本", "😀", "<>&", "\u2028", "\xff", "\xc3", "\xed\xa0\x80", " ", "\\u0041"}
	for round := range 50 {
		want := map[string]int64{}
		for range 200 {
			var b strings.Builder
			for range 1 + r.IntN(6) {
				b.WriteString(parts[r.IntN(len(parts))])
			}
			want[b.String()] = int64(r.IntN(MaxVocab))
		}
		var texts []string
		// encoding/json's own spelling, HTML escaped or not, and with
		// the invalid UTF-8 and the characters JSON allows raw left raw.
		enc, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(enc))
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		e.SetIndent("", "  ")
		if err := e.Encode(want); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, buf.String())
		var raw strings.Builder
		raw.WriteString("{ ")
		first := true
		for s, id := range want {
			if !first {
				raw.WriteString(",\n")
			}
			first = false
			q, _ := json.Marshal(s)
			qs := strings.NewReplacer(`\ufffd`, "\xff", `\u003c`, "<", `\u003e`, ">", `\u0026`, "&", `\u2028`, "\u2028").Replace(string(q))
			raw.WriteString(qs + " : " + jsonInt(id))
		}
		raw.WriteString(" }")
		texts = append(texts, raw.String())
		for _, text := range texts {
			var fromJSON map[string]int64
			if err := json.Unmarshal([]byte(text), &fromJSON); err != nil {
				t.Fatalf("round %d: encoding/json: %v", round, err)
			}
			got, err := scanVocab(text)
			if err != nil {
				t.Fatalf("round %d: %v in %q", round, err, clipQ(text))
			}
			gotMap := map[string]int64{}
			for _, e := range got { // a token given twice (two invalid spellings of U+FFFD): the later id
				gotMap[e.s] = int64(e.id)
			}
			if len(gotMap) != len(fromJSON) {
				t.Fatalf("round %d: %d tokens, encoding/json %d", round, len(gotMap), len(fromJSON))
			}
			for s, id := range fromJSON {
				if gotMap[s] != id {
					t.Fatalf("round %d: token %q id %d, encoding/json %d", round, s, gotMap[s], id)
				}
			}
		}
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// A tokenizer.json is read alike however it is spelt: merges as "a b" or
// [a, b] (tokenizers 0.20 on), indented or not, its keys in any order or
// case (encoding/json's folding: then it reads the whole file itself).
func TestHFSpellingsGiveTheSameTokenizer(t *testing.T) {
	base := tinyHF(t, nil)
	text := strings.Repeat("aab ab abab xaa bba <|end|> é ", 20)
	want, err := LoadHF(strings.NewReader(base))
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := want.Encode(text, true)
	var doc map[string]any
	if err := json.Unmarshal([]byte(base), &doc); err != nil {
		t.Fatal(err)
	}
	model := doc["model"].(map[string]any)
	var pairs [][]string
	for _, m := range model["merges"].([]any) {
		a, b, _ := strings.Cut(m.(string), " ")
		pairs = append(pairs, []string{a, b})
	}
	indented, _ := json.MarshalIndent(doc, "", "\t")
	var spaced bytes.Buffer
	if err := json.Indent(&spaced, []byte(base), "\r", " \t"); err != nil {
		t.Fatal(err)
	}
	variants := map[string]string{
		"indented":        string(indented),
		"merges as pairs": tinyHF(t, func(d map[string]any) { d["model"].(map[string]any)["merges"] = pairs }),
		"model first":     `{"model":` + mustJSON(t, model) + "," + strings.Replace(base[1:], `"model":`, `"unused":`, 1),
		"Model":           strings.Replace(base, `"model":`, `"Model":`, 1),
		"spaces":          spaced.String(),
	}
	for name, v := range variants {
		tok, err := LoadHF(strings.NewReader(v))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := tok.Encode(text, true); !equal(got, wantIDs) {
			t.Errorf("%s: %v, want %v", name, got, wantIDs)
		}
	}
	if _, _, _, ok := cutVocabAndMerges(variants["Model"]); ok {
		t.Errorf("Model: cut, want encoding/json to read it all")
	}
	if _, _, _, ok := cutVocabAndMerges(variants["spaces"]); !ok {
		t.Errorf("spaces: not cut")
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// What is wrong in the vocab or merges is named, JSON or not.
func TestHFVocabAndMergesAreChecked(t *testing.T) {
	base := tinyHF(t, nil)
	setVocab := func(v string) string { return strings.Replace(base, `"vocab":{`, `"vocab":{`+v+`,`, 1) }
	setMerges := func(m string) string {
		i := strings.Index(base, `"merges":[`) + len(`"merges":[`)
		return base[:i] + m + "," + base[i:]
	}
	for _, c := range []struct{ file, want string }{
		{setVocab(`"zz":1.5`), `token "zz" has id 1.5, not an integer`},
		{setVocab(`"zz":1e3`), `token "zz" has id 1e3, not an integer`},
		{setVocab(`"zz":01`), `token "zz" has id 01, not an integer`},
		{setVocab(`"zz":+5`), `token "zz" has id +5, not an integer`},
		{setVocab(`"zz":-`), `token "zz" has id -, not an integer`},
		{setVocab(`"zz":"5"`), `token "zz" has id "5"`},
		{setVocab(`"zz":-1`), `token "zz" has id -1, outside 0..1048575`},
		{setVocab(`"zz":1048576`), `token "zz" has id 1048576, outside`},
		{setVocab(`"zz":99999999999999999999`), `not an integer`},
		{setVocab(`"` + strings.Repeat("z", MaxTokenBytes+1) + `":7`), "a token of 1025 bytes, over the limit of 1024"},
		{setVocab(`"zz" 1`), "vocab: want an object of tokens and their ids"},
		{setVocab("\"z\x01\":1"), "vocab: want an object"},
		{setVocab(`"z\x":1`), "vocab: want an object"},
		{strings.Replace(base, `"vocab":{`, `"vocab":{"zz":1,,`, 1), "vocab: want an object"},
		{strings.Replace(base, `"vocab":{`, `"vocab":[`, 1), "vocab: want an object"},
		{setMerges(`"ab"`), `merges[0]: "ab": want two tokens separated by a space`},
		{setMerges(`"a b c"`), `merges[0]: "a b c": want two tokens`},
		{setMerges(`5`), `merges[0]: want "a b" or [a, b]`},
		{setMerges(`["a"]`), `merges[0]: want "a b" or [a, b]`},
		{setMerges(`["a","b","c"]`), `merges[0]: want "a b" or [a, b]`},
		{setMerges(`["a",5]`), `merges[0]: want "a b" or [a, b]`},
		{setMerges(`"a zz"`), `merges[0] ("a" "zz"): a token not in the vocab`},
		{setMerges(`["a","zz"]`), `merges[0] ("a" "zz"): a token not in the vocab`},
		{strings.Replace(base, `"merges":[`, `"merges":{`, 1), "merges: want an array"},
		{setMerges(`"a b",`), `merges[1]: want "a b" or [a, b]`},
		{base + "x", "not a tokenizer.json"},
		{base[:len(base)-1], "not a tokenizer.json"},
	} {
		_, err := LoadHF(strings.NewReader(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error with %q", err, c.want)
		}
	}
}

// The merges are at most MaxMerges, the vocab at most MaxVocab entries.
func TestHFBoundsAreKept(t *testing.T) {
	var m strings.Builder
	m.WriteString("[")
	for i := range MaxMerges + 1 {
		if i > 0 {
			m.WriteString(",")
		}
		m.WriteString(`"a b"`)
	}
	m.WriteString("]")
	err := scanMerges(m.String(), func(int, string, string) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "over 2097152 merges, the limit") {
		t.Errorf("merges: %v", err)
	}
	var v strings.Builder
	v.WriteString("{")
	for i := range MaxVocab + 1 {
		if i > 0 {
			v.WriteString(",")
		}
		v.WriteString(`"a":1`)
	}
	v.WriteString("}")
	if _, err := scanVocab(v.String()); err == nil || !strings.Contains(err.Error(), "over 1048576 vocab entries, the limit") {
		t.Errorf("vocab: %v", err)
	}
}
