package bpe

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// The tests here need no reference library: the ids against Hugging Face
// tokenizers and tiktoken are in ref_test.go.

func TestInvalidUTF8BecomesOneReplacementPerMaximalSubpart(t *testing.T) {
	// As TextDecoder and Python's errors="replace" give them (WHATWG's
	// examples and Unicode's table 3-8).
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"},
		{"\xff", "\uFFFD"},
		{"\xc3", "\uFFFD"},
		{"\xc3(", "\uFFFD("},
		{"\xe2\x82", "\uFFFD"}, // one, not two (Go's range gives two)
		{"\xe2\x82\xe2\x82", "\uFFFD\uFFFD"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf0\x9f\x98x", "\uFFFDx"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate: ED A0 is not a valid start
		{"\xe0\x80\xaf", "\uFFFD\uFFFD\uFFFD"}, // overlong
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // over U+10FFFF
		{"\xf5\x80", "\uFFFD\uFFFD"},
		{"a\x80\x81b", "a\uFFFD\uFFFDb"},
		{"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"}, // Unicode's example
	} {
		if got := validUTF8(c.in); got != c.want {
			t.Errorf("validUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// tinyHF is a byte-level tokenizer.json: the 256 byte symbols (id = byte)
// and merges of a and b, with the given components.
func tinyHF(t testing.TB, edit func(doc map[string]any)) string {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	merges := [][2]string{{"a", "b"}, {"a", "a"}, {"ab", "ab"}, {"aa", "a"}, {"Ġ", "a"}, {"b", "b"}}
	var ms []string
	for _, m := range merges {
		vocab[m[0]+m[1]] = len(vocab)
		ms = append(ms, m[0]+" "+m[1])
	}
	doc := map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   []any{map[string]any{"id": 1000, "content": "<|end|>", "special": true}},
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "vocab": vocab, "merges": ms},
	}
	if edit != nil {
		edit(doc)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTinyTokenizer(t *testing.T) {
	tok, err := LoadHF(strings.NewReader(tinyHF(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ab, aa, abab, aaa, sa := int32(256), int32(257), int32(258), int32(259), int32(260)
	for _, c := range []struct {
		in   string
		want []int32
	}{
		{"ab", []int32{ab}},
		{"abab", []int32{abab}},
		{"aaa", []int32{aaa}},     // a a first (rank 1), then aa a
		{"aaaa", []int32{aa, aa}}, // leftmost of equal ranks first
		{"x a", []int32{'x', sa}},
		{"a<|end|>b", []int32{'a', 1000, 'b'}},
	} {
		if got := tok.Encode(c.in, true); !equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// Pieces longer than shortPiece merge through a heap: the same ids as the
// quadratic scan, which every shorter piece takes.
func TestLongPiecesMergeAsShortOnes(t *testing.T) {
	tok, err := LoadHF(strings.NewReader(tinyHF(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 2000 {
		var b strings.Builder
		for range 2 + r.IntN(shortPiece) {
			b.WriteByte("aab"[r.IntN(3)])
		}
		p := b.String()
		var sc scratch
		short := tok.appendPiece(nil, p, &sc)
		long := tok.mergeLong(nil, p)
		if !equal(short, long) {
			t.Fatalf("piece %d %q: scan %v, heap %v", n, p, short, long)
		}
	}
}

func TestLimitGivesThePrefix(t *testing.T) {
	tok, err := LoadHF(strings.NewReader(tinyHF(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("ab aa x<|end|> b ", 50)
	all := tok.AppendIDs(nil, text, true, 0)
	for _, limit := range []int{1, 2, 7, 100} {
		got := tok.AppendIDs(nil, text, true, limit)
		if len(got) < limit || !equal(got, all[:len(got)]) {
			t.Errorf("limit %d: %v, want a prefix of %v", limit, got, all)
		}
	}
}

// A tokenizer.json using something not implemented is refused, naming it.
func TestUnsupportedComponentsAreNamed(t *testing.T) {
	for _, c := range []struct {
		edit func(map[string]any)
		want string
	}{
		{func(d map[string]any) { d["normalizer"] = map[string]any{"type": "Lowercase"} }, "normalizer Lowercase is not supported"},
		{func(d map[string]any) {
			d["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "NFKC"}}}
		}, "normalizer NFKC is not supported"},
		{func(d map[string]any) { d["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }, "pre_tokenizer Metaspace is not supported"},
		{func(d map[string]any) { d["pre_tokenizer"] = nil }, "no pre_tokenizer"},
		{func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\d+|\w+`}, "behavior": "Isolated", "invert": false},
				map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}}}
		}, `pre_tokenizer Split: pattern "\\d+|\\w+" is not supported`},
		{func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": regexCL100k}, "behavior": "Removed", "invert": false},
				map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}}}
		}, "pre_tokenizer Split: behavior Removed"},
		{func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Digits"}, map[string]any{"type": "ByteLevel"}}}
		}, "pre_tokenizer Sequence of Digits and ByteLevel is not supported"},
		{func(d map[string]any) { d["model"].(map[string]any)["type"] = "WordPiece" }, "model WordPiece is not supported"},
		{func(d map[string]any) { d["model"].(map[string]any)["byte_fallback"] = true }, "model BPE: byte_fallback is not supported"},
		{func(d map[string]any) { d["model"].(map[string]any)["dropout"] = 0.1 }, "model BPE: dropout is not supported"},
		{func(d map[string]any) { d["model"].(map[string]any)["merges"] = []string{"a zz"} }, `merges[0] ("a" "zz"): a token not in the vocab`},
		{func(d map[string]any) { delete(d["model"].(map[string]any)["vocab"].(map[string]int), "Ġ") }, "the vocab has no token for byte 0x20"},
		{func(d map[string]any) { d["post_processor"] = map[string]any{"type": "RobertaProcessing"} }, "post_processor RobertaProcessing is not supported"},
		{func(d map[string]any) { d["truncation"] = map[string]any{"max_length": 512} }, "truncation is not supported"},
		{func(d map[string]any) {
			d["added_tokens"] = []any{map[string]any{"id": 5000, "content": "<x>", "lstrip": true}}
		}, `added token "<x>": lstrip and rstrip are not supported`},
		{func(d map[string]any) {
			d["added_tokens"] = []any{map[string]any{"id": 5000, "content": "<x>", "single_word": true}}
		}, `added token "<x>": single_word is not supported`},
	} {
		_, err := LoadHF(strings.NewReader(tinyHF(t, c.edit)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error with %q", err, c.want)
		}
	}
}

func TestTiktokenFileIsChecked(t *testing.T) {
	var all strings.Builder
	for b := range 256 {
		fmt.Fprintf(&all, "%s %d\n", b64(string([]byte{byte(b)})), b)
	}
	good := all.String()
	if tok, err := LoadTiktoken(strings.NewReader(good+b64("ab")+" 256\n"), "cl100k_base"); err != nil {
		t.Fatal(err)
	} else if got := tok.Encode("ab<|endoftext|>", false); !equal(got, []int32{256, 100257}) {
		t.Errorf("ids %v, want [256 100257]", got)
	}
	for _, c := range []struct{ file, enc, want string }{
		{good, "p99k", `unknown tiktoken encoding "p99k"`},
		{good + "!!! 300\n", "cl100k_base", "line 257: the token is not base64"},
		{good + b64("ab") + " 5\n", "cl100k_base", "line 257: rank 5 given twice"},
		{good + b64("ab") + " x\n", "cl100k_base", `line 257: rank "x"`},
		{good + b64("ab") + "\n", "cl100k_base", "line 257: want a base64 token"},
		{good + b64(strings.Repeat("a", MaxTokenBytes+1)) + " 300\n", "cl100k_base", "over the limit of 1024"},
		{strings.Replace(good, b64("A")+" 65\n", "", 1), "cl100k_base", "no token for byte 0x41"},
	} {
		_, err := LoadTiktoken(strings.NewReader(c.file), c.enc)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error with %q", err, c.want)
		}
	}
}

func TestOversizeFilesAreRefusedUnread(t *testing.T) {
	big := strings.NewReader(`{"x":"` + strings.Repeat("a", MaxFileBytes) + `"}`)
	if _, err := LoadHF(big); err == nil || !strings.Contains(err.Error(), "over the 64 MiB limit") {
		t.Errorf("LoadHF: %v", err)
	}
}

// BenchmarkLongPiece is one piece of 1 MiB (a word without a space):
// merged through the heap, O(n log n), where the scan would be quadratic.
func BenchmarkLongPiece(b *testing.B) {
	tok, err := LoadHF(strings.NewReader(tinyHF(b, nil)))
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("aab", 1<<20/3)
	b.SetBytes(int64(len(text)))
	for range b.N {
		tok.AppendIDs(nil, text, true, 0)
	}
}

// A Tokenizer is shared by a replica's concurrent calls (run with -race).
func TestConcurrentEncode(t *testing.T) {
	tok, err := LoadHF(strings.NewReader(tinyHF(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("aab ab<|end|> x", 20) + strings.Repeat("ab", 200)
	want := tok.Encode(text, true)
	errs := make(chan string, 4)
	for range 4 {
		go func() {
			for range 50 {
				if got := tok.Encode(text, true); !equal(got, want) {
					errs <- fmt.Sprintf("%v", got)
					return
				}
			}
			errs <- ""
		}()
	}
	for range 4 {
		if e := <-errs; e != "" {
			t.Errorf("concurrent encode gave %s, want %v", e, want)
		}
	}
}

// The classes are Unicode 16.0's, as the references' regex engines have
// them: Go's unicode package (15.0) has no U+2EBF0 (CJK Extension I, 15.1)
// nor U+13460 (Egyptian Hieroglyphs Extended-A, 16.0).
func TestClassesAreUnicode16(t *testing.T) {
	for _, r := range []rune{'a', 0x2EBF0, 0x13460, 0x10D50} {
		if classify(r)&cL == 0 {
			t.Errorf("%U: not a letter", r)
		}
	}
	if classify(0x10940)&cL != 0 { // Sidetic, Unicode 17.0: not yet
		t.Errorf("U+10940: a letter")
	}
}

// Hugging Face's NFC knows Unicode 9.0: U+0D3C (ccc 9 since 10.0) is a
// starter to it, so it stays after U+0301 where standard NFC reorders it.
func TestNFCAsTokenizers(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"A\u0308\u0301\u0d3c", "\u00c4\u0301\u0d3c"},
		{"A\u0308\u0d3c\u0301", "\u00c4\u0d3c\u0301"},
		{"e\u0301 A\u030a", "\u00e9 \u00c5"},
		{"b\u0301\u0316", "b\u0316\u0301"},
		{"plain", "plain"},
	} {
		if got := nfcAsTokenizers(c.in); got != c.want {
			t.Errorf("nfcAsTokenizers(%+q) = %+q, want %+q", c.in, got, c.want)
		}
	}
}
