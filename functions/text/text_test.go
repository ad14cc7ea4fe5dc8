package text

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func vocabOf(t testing.TB, tokens ...string) *Vocab {
	t.Helper()
	v, err := LoadVocab(strings.NewReader(strings.Join(tokens, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func tokenizer(t testing.TB, v *Vocab, o WordPieceOptions) *Tokenizer {
	t.Helper()
	tk, err := NewTokenizer(v, o)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// pieces tokenizes text and spells the ids out as tokens.
func pieces(t *testing.T, tk *Tokenizer, text string) []string {
	t.Helper()
	var out []string
	for _, id := range tk.Tokenize(text) {
		tok, ok := tk.Vocab().Token(id)
		if !ok {
			t.Fatalf("id %d is not in the vocab", id)
		}
		out = append(out, tok)
	}
	return out
}

var specials = []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}

func TestLoadVocab(t *testing.T) {
	v, err := LoadVocab(strings.NewReader("[PAD]\r\n[UNK]\nhello\n##lo"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Size() != 4 {
		t.Errorf("Size = %d, want 4", v.Size())
	}
	for tok, want := range map[string]int32{"[PAD]": 0, "[UNK]": 1, "hello": 2, "##lo": 3} {
		if id, ok := v.ID(tok); !ok || id != want {
			t.Errorf("ID(%q) = %d, %v; want %d", tok, id, ok, want)
		}
	}
	if _, ok := v.ID("nope"); ok {
		t.Error(`ID("nope") found`)
	}
	if tok, ok := v.Token(3); !ok || tok != "##lo" {
		t.Errorf("Token(3) = %q, %v", tok, ok)
	}
	if _, ok := v.Token(4); ok {
		t.Error("Token(4) found")
	}

	for _, c := range []struct{ in, want string }{
		{"a\nb\n\nc\n", "vocab line 3: empty token"},
		{"a\nb\nc\nb\n", `vocab line 4: duplicate token "b" (first on line 2)`},
		{"", "vocab is empty"},
		{"a\n" + strings.Repeat("x", 2<<20) + "\n", "vocab line 2: longer than 1 MiB"},
	} {
		if _, err := LoadVocab(strings.NewReader(c.in)); err == nil || err.Error() != c.want {
			t.Errorf("LoadVocab(%.20q...): error %v, want %q", c.in, err, c.want)
		}
	}
}

func TestBuiltinVocab(t *testing.T) {
	v := BuiltinVocab()
	for i, s := range specials {
		if id, ok := v.ID(s); !ok || id != int32(i) {
			t.Errorf("%s has id %d (%v), want %d", s, id, ok, i)
		}
	}
	if v.Size() < 3000 || v.Size() > 10000 {
		t.Errorf("builtin vocab has %d tokens, want a few thousand", v.Size())
	}
	if fi, err := os.Stat("vocab/builtin.txt"); err != nil || fi.Size() > 100<<10 {
		t.Errorf("vocab/builtin.txt: %v, want under 100 KB", err)
	}
	// Any printable ASCII, cased or not, tokenizes without [UNK].
	rng := rand.New(rand.NewPCG(1, 2))
	for _, o := range []WordPieceOptions{{Lowercase: true, StripAccents: true}, {}} {
		tk := tokenizer(t, v, o)
		for range 200 {
			b := make([]byte, 1+rng.IntN(60))
			for i := range b {
				b[i] = byte(' ' + rng.IntN(95))
			}
			if slices.Contains(tk.Tokenize(string(b)), tk.unk) {
				t.Fatalf("%+v: %q has an [UNK]: %v", o, b, pieces(t, tk, string(b)))
			}
		}
	}
	tk := tokenizer(t, v, WordPieceOptions{Lowercase: true, StripAccents: true})
	if got, want := pieces(t, tk, "The weather is good today."), []string{"the", "weather", "is", "good", "today", "."}; !slices.Equal(got, want) {
		t.Errorf("common words: %q, want %q", got, want)
	}
}

func TestBERTWordPieceExamples(t *testing.T) {
	// The vocab of google-research/bert's tokenization_test.py, plus the
	// pieces of the "unaffable" example in its docstring.
	v := vocabOf(t, "[PAD]", "[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ",", "low", "lowest", "##aff", "##able")
	tk := tokenizer(t, v, WordPieceOptions{Lowercase: true, StripAccents: true})
	for text, want := range map[string][]string{
		"unaffable":             {"un", "##aff", "##able"},
		"unwanted running":      {"un", "##want", "##ed", "runn", "##ing"},
		"unwantedX running":     {"[UNK]", "runn", "##ing"}, // lowercased: "unwantedx" has no split
		"UNwant\u00e9d,running": {"un", "##want", "##ed", ",", "runn", "##ing"},
		"lowest low":            {"lowest", "low"},
		"":                      nil,
		"wa want":               {"wa", "want"},
		"xyz":                   {"[UNK]"},
	} {
		if got := pieces(t, tk, text); !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", text, got, want)
		}
	}
	// Cased: "unwantedX" keeps its X, which is no piece either.
	cased := tokenizer(t, v, WordPieceOptions{})
	if got := pieces(t, cased, "unwantedX running"); !slices.Equal(got, []string{"[UNK]", "runn", "##ing"}) {
		t.Errorf("cased: %q", got)
	}
	if got := pieces(t, cased, "Unwanted"); !slices.Equal(got, []string{"[UNK]"}) {
		t.Errorf("cased Unwanted: %q, want [UNK]", got)
	}
}

func TestBasicTokenization(t *testing.T) {
	v := vocabOf(t, append(slices.Clone(specials), "hello", "hällo", "hallo", "HaLLo", "HäLLo", "HeLLo", "how", "are", "you",
		"Are", "yoU", "!", "?", "ah", "zz", "\u535A", "\u63A8", "cafe", "café", "a", "b", "c", "$", "=", "^", "`", "|", "~", "+", "<", ">",
		"\u00bf", "\u00a1", "\u201c", "\u201d", "\u2014")...)
	cases := []struct {
		o    WordPieceOptions
		text string
		want []string
	}{
		// From BERT's and Hugging Face's BasicTokenizer tests.
		{WordPieceOptions{Lowercase: true, StripAccents: true}, " \tHeLLo!how  \n Are yoU?  ", []string{"hello", "!", "how", "are", "you", "?"}},
		{WordPieceOptions{}, " \tHeLLo!how  \n Are yoU?  ", []string{"HeLLo", "!", "how", "Are", "yoU", "?"}},
		{WordPieceOptions{Lowercase: true, StripAccents: true}, "H\u00e9llo", []string{"hello"}},
		{WordPieceOptions{Lowercase: true}, " \tHäLLo!how  \n Are yoU?  ", []string{"hällo", "!", "how", "are", "you", "?"}},
		{WordPieceOptions{Lowercase: true, StripAccents: true}, " \tHäLLo!how  \n Are yoU?  ", []string{"hallo", "!", "how", "are", "you", "?"}},
		{WordPieceOptions{StripAccents: true}, " \tHäLLo!how  \n Are yoU?  ", []string{"HaLLo", "!", "how", "Are", "yoU", "?"}},
		{WordPieceOptions{}, " \tHäLLo!how  \n Are yoU?  ", []string{"HäLLo", "!", "how", "Are", "yoU", "?"}},
		{WordPieceOptions{}, "ah\u535A\u63A8zz", []string{"ah", "\u535A", "\u63A8", "zz"}},
		// ASCII symbols are punctuation to BERT, though not to Unicode.
		{WordPieceOptions{}, "a$b=c^a`b|c~a+b<c>", []string{"a", "$", "b", "=", "c", "^", "a", "`", "b", "|", "c", "~", "a", "+", "b", "<", "c", ">"}},
		// Unicode punctuation splits too.
		{WordPieceOptions{}, "\u00bfhow?\u00a1you!\u201chello\u201d\u2014", []string{"\u00bf", "how", "?", "\u00a1", "you", "!", "\u201c", "hello", "\u201d", "\u2014"}},
		// Control and format characters vanish (they do not split words);
		// exotic spaces split.
		{WordPieceOptions{}, "he\x00l\x07lo\u200b\ufeff ho\u00adw\u00a0are\u3000you\u2028a\u2029b", []string{"hello", "how", "are", "you", "a", "b"}},
		// Already decomposed accents: the marks go when stripping.
		{WordPieceOptions{Lowercase: true, StripAccents: true}, "Cafe\u0301", []string{"cafe"}},
		{WordPieceOptions{Lowercase: true}, "CAF\u00c9", []string{"café"}},
		// Invalid UTF-8 is dropped like U+FFFD.
		{WordPieceOptions{}, "ca\xfffe \ufffdhow", []string{"cafe", "how"}},
	}
	for _, c := range cases {
		tk := tokenizer(t, v, c.o)
		if got := pieces(t, tk, c.text); !slices.Equal(got, c.want) {
			t.Errorf("%+v %q: %q, want %q", c.o, c.text, got, c.want)
		}
	}
}

// TestGolden compares with testdata/golden.jsonl, made by
// testdata/bert_reference.py (BERT's Python tokenizer, real NFD) on the
// builtin vocab, for all four option combinations.
func TestGolden(t *testing.T) {
	f, err := os.Open("testdata/golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := BuiltinVocab()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var g struct {
			Text         string
			Lower, Strip bool
			Tokens       []string
			IDs          []int32
		}
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		tk := tokenizer(t, v, WordPieceOptions{Lowercase: g.Lower, StripAccents: g.Strip})
		got := tk.Tokenize(g.Text)
		if len(got) == 0 && len(g.IDs) == 0 {
			n++
			continue
		}
		if diff := cmp.Diff(g.IDs, got); diff != "" {
			t.Errorf("lower=%v strip=%v %q: got %q, want %q\n%s", g.Lower, g.Strip, g.Text, pieces(t, tk, g.Text), g.Tokens, diff)
		}
		n++
	}
	if n < 40 {
		t.Fatalf("only %d golden lines", n)
	}
}

func TestMaxCharsPerWord(t *testing.T) {
	v := vocabOf(t, append(slices.Clone(specials), "a", "##a", "b", "##b")...)
	tk := tokenizer(t, v, WordPieceOptions{})
	if got := pieces(t, tk, strings.Repeat("a", 100)+" b"); len(got) != 101 || got[0] != "a" || got[1] != "##a" || got[100] != "b" {
		t.Errorf("100 chars: %d pieces %q..., want 100 a pieces and b", len(got), got[:3])
	}
	if got := pieces(t, tk, strings.Repeat("a", 101)+" b"); !slices.Equal(got, []string{"[UNK]", "b"}) {
		t.Errorf("101 chars: %q, want [UNK] b", got)
	}
	short := tokenizer(t, v, WordPieceOptions{MaxCharsPerWord: 3})
	if got := pieces(t, short, "aaa aaaa ab"); !slices.Equal(got, []string{"a", "##a", "##a", "[UNK]", "a", "##b"}) {
		t.Errorf("max 3: %q", got)
	}
	// Characters, not bytes, are counted.
	if got := pieces(t, short, "ééé"); !slices.Equal(got, []string{"[UNK]"}) {
		t.Errorf("max 3, 3 unknown chars: %q, want one [UNK]", got)
	}
}

func TestNewTokenizerErrors(t *testing.T) {
	for _, missing := range []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]"} {
		v := vocabOf(t, slices.DeleteFunc(slices.Clone(specials), func(s string) bool { return s == missing })...)
		if _, err := NewTokenizer(v, WordPieceOptions{}); err == nil || !strings.Contains(err.Error(), "no "+missing+" token") {
			t.Errorf("vocab without %s: error %v", missing, err)
		}
	}
	if _, err := NewTokenizer(BuiltinVocab(), WordPieceOptions{MaxCharsPerWord: -1}); err == nil || !strings.Contains(err.Error(), "max chars per word -1") {
		t.Errorf("MaxCharsPerWord -1: error %v", err)
	}
	if _, err := NewTokenizer(nil, WordPieceOptions{}); err == nil {
		t.Error("nil vocab: no error")
	}
}

// smallVocab puts [PAD] at a non-zero id, so padding with 0 would show.
func smallVocab(t *testing.T) *Tokenizer {
	return tokenizer(t, vocabOf(t, "[UNK]", "[CLS]", "[SEP]", "[PAD]", "a", "b", "c", "d", "e", "."), WordPieceOptions{Lowercase: true})
}

const (
	unk, cls, sep, pad = 0, 1, 2, 3
	ta, tb, tc, td, te = 4, 5, 6, 7, 8
	dot                = 9
)

func TestEncode(t *testing.T) {
	tk := smallVocab(t)
	cases := []struct {
		text      string
		maxLen    int
		ids, mask []int32
	}{
		{"a b c", 8, []int32{cls, ta, tb, tc, sep, pad, pad, pad}, []int32{1, 1, 1, 1, 1, 0, 0, 0}},
		{"a b c", 5, []int32{cls, ta, tb, tc, sep}, []int32{1, 1, 1, 1, 1}},
		{"a b c d e", 5, []int32{cls, ta, tb, tc, sep}, []int32{1, 1, 1, 1, 1}},
		{"A x.", 6, []int32{cls, ta, unk, dot, sep, pad}, []int32{1, 1, 1, 1, 1, 0}},
		{"", 4, []int32{cls, sep, pad, pad}, []int32{1, 1, 0, 0}},
		{"a b", 2, []int32{cls, sep}, []int32{1, 1}},
		{"a b", 1, []int32{cls}, []int32{1}},
		{"a b", 0, []int32{}, []int32{}},
	}
	for _, c := range cases {
		ids, mask := tk.Encode(c.text, c.maxLen)
		if diff := cmp.Diff(c.ids, ids); diff != "" {
			t.Errorf("Encode(%q, %d) ids (-want +got):\n%s", c.text, c.maxLen, diff)
		}
		if diff := cmp.Diff(c.mask, mask); diff != "" {
			t.Errorf("Encode(%q, %d) mask (-want +got):\n%s", c.text, c.maxLen, diff)
		}
	}
}

func TestPack(t *testing.T) {
	tk := smallVocab(t)
	cases := []struct {
		segments  []string
		maxLen    int
		ids, segs []int32
		truncated int
	}{
		{[]string{"a b", "c"}, 8, []int32{cls, ta, tb, sep, tc, sep, pad, pad}, []int32{1, 1, 1, 1, 2, 2, 0, 0}, 0},
		{[]string{"a b", "c", "d e"}, 9, []int32{cls, ta, tb, sep, tc, sep, td, te, sep}, []int32{1, 1, 1, 1, 2, 2, 3, 3, 3}, 0},
		// The third segment is cut to fit, keeping its [SEP].
		{[]string{"a b", "c", "d e"}, 8, []int32{cls, ta, tb, sep, tc, sep, td, sep}, []int32{1, 1, 1, 1, 2, 2, 3, 3}, 1},
		// No room for a token of the third: it and the fourth are dropped.
		{[]string{"a b", "c", "d e", "a"}, 7, []int32{cls, ta, tb, sep, tc, sep, pad}, []int32{1, 1, 1, 1, 2, 2, 0}, 3},
		// The first segment alone overflows.
		{[]string{"a b c d e", "a"}, 4, []int32{cls, ta, tb, sep}, []int32{1, 1, 1, 1}, 4},
		// An empty segment is just its [SEP].
		{[]string{"a", "", "b"}, 7, []int32{cls, ta, sep, sep, tb, sep, pad}, []int32{1, 1, 1, 2, 3, 3, 0}, 0},
		{nil, 3, []int32{cls, pad, pad}, []int32{1, 0, 0}, 0},
		{[]string{"a b"}, 1, []int32{cls}, []int32{1}, 2},
		{[]string{"a b", "c"}, 0, []int32{}, []int32{}, 3},
	}
	for _, c := range cases {
		ids, mask, segs, truncated := tk.Pack(c.segments, c.maxLen)
		wantMask := make([]int32, len(c.segs))
		for i, s := range c.segs {
			if s != 0 {
				wantMask[i] = 1
			}
		}
		if diff := cmp.Diff(c.ids, ids); diff != "" {
			t.Errorf("Pack(%q, %d) ids (-want +got):\n%s", c.segments, c.maxLen, diff)
		}
		if diff := cmp.Diff(c.segs, segs); diff != "" {
			t.Errorf("Pack(%q, %d) segment ids (-want +got):\n%s", c.segments, c.maxLen, diff)
		}
		if diff := cmp.Diff(wantMask, mask); diff != "" {
			t.Errorf("Pack(%q, %d) mask (-want +got):\n%s", c.segments, c.maxLen, diff)
		}
		if truncated != c.truncated {
			t.Errorf("Pack(%q, %d) truncated %d, want %d", c.segments, c.maxLen, truncated, c.truncated)
		}
	}
	// One segment packs like Encode.
	ids, mask := tk.Encode("a b c d", 5)
	pids, pmask, _, _ := tk.Pack([]string{"a b c d"}, 5)
	if !slices.Equal(ids, pids) || !slices.Equal(mask, pmask) {
		t.Errorf("Pack of one segment %v %v, Encode %v %v", pids, pmask, ids, mask)
	}
}

func TestConcurrentUse(t *testing.T) {
	tk := tokenizer(t, BuiltinVocab(), WordPieceOptions{Lowercase: true, StripAccents: true})
	texts := benchTexts(50)
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i], _ = tk.Encode(s, 64)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			for i, s := range texts {
				if got, _ := tk.Encode(s, 64); !slices.Equal(got, want[i]) {
					errs <- s
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode(%q) differs", s)
	}
}

// benchTexts are news-like sentences with some punctuation, numbers,
// accents and rare words.
func benchTexts(n int) []string {
	words := strings.Fields(`The team said on Monday that its new model was trained on millions of
		examples, and the results (about 12.5% better) surprised researchers. Café owners in Zürich
		reported record sales; the weather stayed unusually warm — temperatures reached 31 degrees.
		Preprocessing throughput matters because GPUs wait for batches otherwise.`)
	rng := rand.New(rand.NewPCG(7, 7))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for j := range 20 + rng.IntN(40) {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		out[i] = b.String()
	}
	return out
}

func BenchmarkTokenize(b *testing.B) {
	texts := benchTexts(256)
	for _, o := range []struct {
		name string
		o    WordPieceOptions
	}{{"uncased", WordPieceOptions{Lowercase: true, StripAccents: true}}, {"cased", WordPieceOptions{}}} {
		b.Run(o.name, func(b *testing.B) {
			tk := tokenizer(b, BuiltinVocab(), o.o)
			var buf []int32
			tokens, bytes := 0, 0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s := texts[i%len(texts)]
				buf = tk.AppendTokens(buf[:0], s)
				tokens += len(buf)
				bytes += len(s)
				i++
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
			b.SetBytes(int64(bytes / max(i, 1)))
		})
	}
}

func BenchmarkEncode128(b *testing.B) {
	texts := benchTexts(256)
	tk := tokenizer(b, BuiltinVocab(), WordPieceOptions{Lowercase: true, StripAccents: true})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tk.Encode(texts[i%len(texts)], 128)
		i++
	}
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "samples/s")
}
