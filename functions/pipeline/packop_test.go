package pipeline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/format/wds"
)

func packSpec(bpeParams, packParams string) string {
	return "ops:\n  - text\n  - {op: bpe, tokenizer: tiny.json" + bpeParams + "}\n  - {op: pack" + packParams + "}\n"
}

// Process gives a packing pipeline's document: BOS text EOS uncut; the
// pack op's options take EOS from the post-processor and pad with it.
func TestPackOpGivesTheDocumentAndItsOptions(t *testing.T) {
	o := Options{VocabDir: tokenizerDir(t)}
	p, err := Lookup(packSpec(", mode: ids", ", seq_len: 4"), o)
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, p, wds.Sample{Key: "k", Files: map[string][]byte{"txt": []byte("hi hi hi hi!")}}, 1)
	ids, err := DocIDs(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{300, 256, 257, 257, 257, '!', 301}; !cmp.Equal(ids, want) {
		t.Errorf("document %v, want %v (longer than seq_len: uncut)", ids, want)
	}
	po, ok := PackingOf(p)
	if want := (PackOptions{SeqLen: 4, Tail: TailPad, EOS: 301, PadID: 301}); !ok || po != want {
		t.Errorf("PackingOf = %+v, %v; want %+v", po, ok, want)
	}
	p, err = Lookup(packSpec(", mode: ids, add_special: false", ", tail: drop, eos_id: 5, pad_id: 0"), o)
	if err != nil {
		t.Fatal(err)
	}
	po, _ = PackingOf(p)
	if want := (PackOptions{SeqLen: 2048, Tail: TailDrop, EOS: 5, PadID: 0}); po != want {
		t.Errorf("PackingOf = %+v, want %+v", po, want)
	}
	if _, ok := PackingOf(mustLookup(t, bpeSpec(", tokenizer: tiny.json"), o)); ok {
		t.Error("a pipeline without pack packs")
	}
}

func mustLookup(t *testing.T, spec string, o Options) Pipeline {
	t.Helper()
	p, err := Lookup(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The tiny tokenizer without its post-processor has no EOS to take.
func TestPackOpSpecProblems(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{packSpec("", ""), "ops[2] (pack): takes ids, but ops[1] (bpe) gives tokens (give the bpe op mode: ids)"},
		{packSpec(", mode: ids", ", seq_len: 1"), "ops[2] (pack): seq_len 1: want 2..262144"},
		{packSpec(", mode: ids", ", tail: wrap"), `ops[2] (pack): tail "wrap": want one of pad, drop`},
		{packSpec(", mode: ids", ", eos_id: -2"), "ops[2] (pack): eos_id -2: want -1..1048575"},
		{"label: {field: label}\n" + packSpec(", mode: ids", ""), "label: pack makes rows of many documents"},
		{"ops:\n  - text\n  - pack\n", "ops[1] (pack): takes ids, but ops[0] (text) gives text"},
		{packSpec(", mode: ids", "") + "  - normalize\n", "ops[3] (normalize): takes"},
	} {
		err := Check(c.spec)
		if probs := problems(t, err); len(probs) != 1 || !strings.Contains(probs[0], c.want) {
			t.Errorf("%s: %q, want one with %q", c.spec, probs, c.want)
		}
	}
	if err := Check(LMPretrain); err != nil {
		t.Errorf("Check(%s): %v", LMPretrain, err)
	}

	dir := tokenizerDir(t)
	// tiny.json without a post-processor and with <e> for </s>: no EOS.
	var doc map[string]any
	if err := json.Unmarshal(tinyTokenizerJSON(t), &doc); err != nil {
		t.Fatal(err)
	}
	doc["post_processor"] = nil
	doc["added_tokens"] = []any{map[string]any{"id": 301, "content": "<e>", "special": true}}
	b, _ := json.Marshal(doc)
	if err := os.WriteFile(filepath.Join(dir, "noeos.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ spec, want string }{
		{strings.Replace(packSpec(", mode: ids", ""), "tiny.json", "noeos.json", 1), "eos_id: the tokenizer's post-processor adds no EOS and it has none of <|endoftext|>"},
		{packSpec(", mode: ids, add_special: false", ", pad_id: 0"), ""}, // </s> by its spelling
		{packSpec(", mode: ids", ", pad_id: 400"), "pad_id 400: the tokenizer's ids are 0..301"},
	} {
		_, err := Lookup(c.spec, Options{VocabDir: dir})
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.spec, err)
			}
			continue
		}
		if probs := problems(t, err); len(probs) != 1 || !strings.Contains(probs[0], c.want) {
			t.Errorf("%s: %q, want one with %q", c.spec, probs, c.want)
		}
	}
	// A bpe op that cannot load its file is the one problem reported.
	_, err := Lookup(strings.Replace(packSpec(", mode: ids", ""), "tiny.json", "missing.json", 1), Options{VocabDir: dir})
	if probs := problems(t, err); len(probs) != 1 || !strings.Contains(probs[0], "missing.json") {
		t.Errorf("missing tokenizer: %q", probs)
	}
}

// lm-pretrain reads tokenizer.json from the vocab directory.
func TestLMPretrainBuiltin(t *testing.T) {
	if _, err := Lookup(LMPretrain, Options{VocabDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), `tokenizer "tokenizer.json": no such file in the vocab directory`) {
		t.Errorf("without tokenizer.json: %v", err)
	}
	dir := tokenizerDir(t)
	if err := os.Rename(filepath.Join(dir, "tiny.json"), filepath.Join(dir, LMPretrainTokenizer)); err != nil {
		t.Fatal(err)
	}
	p, err := Lookup(LMPretrain, Options{VocabDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if po, ok := PackingOf(p); !ok || po.SeqLen != 2048 || po.Tail != TailPad || po.EOS != 301 {
		t.Errorf("PackingOf(lm-pretrain) = %+v, %v", po, ok)
	}
	out := run(t, p, wds.Sample{Key: "k", Files: map[string][]byte{"jsonl": []byte(`{"text": "hi"}`)}}, 1)
	if ids, err := DocIDs(out); err != nil || !cmp.Equal(ids, []int32{300, 256, 301}) {
		t.Errorf("document %v, %v", ids, err)
	}
}
