package pipeline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/format/wds"
)

// tinyTokenizerJSON is a byte-level tokenizer.json: the 256 byte symbols
// (id = byte, spelt as GPT-2's bytes_to_unicode does), the merges of "h
// i" (256) and "Ġ hi" (257), <s> 300 and </s> 301 put around every
// sequence by a TemplateProcessing post-processor.
func tinyTokenizerJSON(t *testing.T) []byte {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for b := range 256 {
		r := rune(b)
		if !((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	vocab["hi"], vocab["Ġhi"] = 256, 257
	doc := map[string]any{
		"truncation": nil, "padding": nil, "normalizer": nil,
		"added_tokens": []any{
			map[string]any{"id": 300, "content": "<s>", "special": true},
			map[string]any{"id": 301, "content": "</s>", "special": true},
		},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
				map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}},
			},
			"special_tokens": map[string]any{
				"<s>":  map[string]any{"id": "<s>", "ids": []int{300}, "tokens": []string{"<s>"}},
				"</s>": map[string]any{"id": "</s>", "ids": []int{301}, "tokens": []string{"</s>"}},
			}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"h i", "Ġ hi"}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func bpeSpec(params string) string {
	return "ops:\n  - text\n  - {op: bpe" + params + "}\n"
}

func tokenizerDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tiny.json"), tinyTokenizerJSON(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestBPEOpPadsAndCutsKeepingEOS(t *testing.T) {
	o := Options{VocabDir: tokenizerDir(t)}
	for _, c := range []struct {
		params, text string
		ids, mask    []int32
	}{
		{", tokenizer: tiny.json, max_len: 8", "hi hi!", []int32{300, 256, 257, '!', 301, 0, 0, 0}, []int32{1, 1, 1, 1, 1, 0, 0, 0}},
		{", tokenizer: tiny.json, max_len: 4", "hi hi!", []int32{300, 256, 257, 301}, []int32{1, 1, 1, 1}},
		{", tokenizer: tiny.json, max_len: 3, add_special: false, pad_id: 9", "hi", []int32{256, 9, 9}, []int32{1, 0, 0}},
		{", tokenizer: tiny.json, max_len: 6", "a</s>b", []int32{300, 'a', 301, 'b', 301, 0}, []int32{1, 1, 1, 1, 1, 0}},
		{", tokenizer: tiny.json, max_len: 9, special_tokens: text", "a</s>", []int32{300, 'a', '<', '/', 's', '>', 301, 0, 0}, []int32{1, 1, 1, 1, 1, 1, 1, 0, 0}},
		{", tokenizer: tiny.json, max_len: 3", "", []int32{300, 301, 0}, []int32{1, 1, 0}},
	} {
		p, err := Lookup(bpeSpec(c.params), o)
		if err != nil {
			t.Fatal(err)
		}
		out := run(t, p, wds.Sample{Key: "k", Files: map[string][]byte{"txt": []byte(c.text)}}, 1)
		ids, mask := int32s(out.Fields[0].Data), int32s(out.Fields[1].Data)
		if !cmp.Equal(ids, c.ids) || !cmp.Equal(mask, c.mask) {
			t.Errorf("%s %q: ids %v mask %v, want %v %v", c.params, c.text, ids, mask, c.ids, c.mask)
		}
	}
}

func TestBPEOpBoundsTheText(t *testing.T) {
	p, err := Lookup(bpeSpec(", tokenizer: tiny.json, max_len: 8, max_text_bytes: 10"), Options{VocabDir: tokenizerDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Process(wds.Sample{Key: "k", Files: map[string][]byte{"txt": []byte("hi hi hi hi")}}, 1)
	if err == nil || !strings.Contains(err.Error(), "text of 11 B, over the op's max_text_bytes (10 B)") {
		t.Errorf("got %v", err)
	}
}

// At submit (Check) the tokenizer file is the replicas', so only its name
// is checked; on a replica an unsupported component is refused by name.
func TestBPEOpSpecProblems(t *testing.T) {
	for _, c := range []struct{ params, want string }{
		{"", "missing parameter tokenizer: a Hugging Face tokenizer.json"},
		{", tokenizer: /etc/passwd.json", `tokenizer "/etc/passwd.json": want a file name within the replica's vocab directory`},
		{", tokenizer: ../x.json", `tokenizer "../x.json": want a file name within`},
		{", tokenizer: vocab.txt", `tokenizer "vocab.txt": want a tokenizer.json (*.json) or a tiktoken rank file (*.tiktoken)`},
		{", tokenizer: mine.tiktoken", `tokenizer "mine.tiktoken": set encoding (one of cl100k_base, o200k_base, p50k_base, r50k_base)`},
		{", tokenizer: x.json, encoding: cl100k_base", "encoding cl100k_base: only for a .tiktoken file"},
		{", tokenizer: x.tiktoken, encoding: p99k", `encoding "p99k": want one of auto, cl100k_base`},
		{", tokenizer: x.json, mode: pack", `mode "pack": want one of pad, ids`},
	} {
		err := Check(bpeSpec(c.params))
		if err == nil {
			t.Errorf("%s: accepted", c.params)
			continue
		}
		if probs := problems(t, err); len(probs) != 1 || !strings.Contains(probs[0], c.want) {
			t.Errorf("%s: %q, want one with %q", c.params, probs, c.want)
		}
	}
	for _, ok := range []string{", tokenizer: llama3.json", ", tokenizer: cl100k_base.tiktoken", ", tokenizer: mine.tiktoken, encoding: o200k_base"} {
		if err := Check(bpeSpec(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}

	dir := tokenizerDir(t)
	var doc map[string]any
	if err := json.Unmarshal(tinyTokenizerJSON(t), &doc); err != nil {
		t.Fatal(err)
	}
	doc["normalizer"] = map[string]any{"type": "NFKC"}
	b, _ := json.Marshal(doc)
	if err := os.WriteFile(filepath.Join(dir, "nfkc.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Lookup(bpeSpec(", tokenizer: nfkc.json"), Options{VocabDir: dir})
	if probs := problems(t, err); len(probs) != 1 || probs[0] != `line 3: ops[1] (bpe): tokenizer "nfkc.json": normalizer NFKC is not supported (supported: NFC, or none)` {
		t.Errorf("unsupported normalizer: %q", probs)
	}
}

// The tokenizer file is named like a wordpiece vocab: within --vocab-dir,
// and what is outside it is never read nor described.
func TestBPEOpReadsOnlyTheVocabDirectory(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.json"), tinyTokenizerJSON(t), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := tokenizerDir(t)
	if err := os.Symlink(filepath.Join(outside, "secret.json"), filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"tiny.json", Options{}, `tokenizer "tiny.json": no vocab directory is set (--vocab-dir)`},
		{"link.json", Options{VocabDir: dir}, `tokenizer "link.json": not a readable file within the vocab directory`},
		{"missing.json", Options{VocabDir: dir}, `tokenizer "missing.json": no such file in the vocab directory`},
	} {
		_, err := Lookup(bpeSpec(", tokenizer: "+c.name), c.o)
		if probs := problems(t, err); len(probs) != 1 || !strings.Contains(probs[0], c.want) {
			t.Errorf("%s: %q, want %q", c.name, probs, c.want)
		}
	}
}

func TestTokenizerCacheSharesOneLoad(t *testing.T) {
	o := Options{VocabDir: tokenizerDir(t), Tokenizers: NewTokenizerCache()}
	a, err := o.Tokenizers.load("tiny.json", "", o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := o.Tokenizers.load("tiny.json", "", o)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the same unchanged file loaded twice")
	}
	if err := os.WriteFile(filepath.Join(o.VocabDir, "tiny.json"), append(tinyTokenizerJSON(t), ' ', ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := o.Tokenizers.load("tiny.json", "", o); err != nil || c == a {
		t.Errorf("a changed file: %v, same tokenizer %v", err, c == a)
	}
}

// A replica runs one pipeline's samples at once (run with -race).
func TestBPEOpConcurrent(t *testing.T) {
	p, err := Lookup(bpeSpec(", tokenizer: tiny.json, max_len: 64"), Options{VocabDir: tokenizerDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"hi hi hi", strings.Repeat("hi ", 100), "", "a</s>b hi"}
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = int32s(run(t, p, wds.Sample{Key: "k", Files: map[string][]byte{"txt": []byte(s)}}, 1).Fields[0].Data)
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for k := range 100 {
				i := (g + k) % len(texts)
				out, err := p.Process(wds.Sample{Key: "k", Files: map[string][]byte{"txt": []byte(texts[i])}}, 1)
				if err == nil && !cmp.Equal(int32s(out.Fields[0].Data), want[i]) {
					err = fmt.Errorf("text %d: ids %v, want %v", i, int32s(out.Fields[0].Data), want[i])
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
