package pipeline

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/tabular"
	"github.com/sluice-project/sluice/functions/text"
)

func int32s(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func int64s(b []byte) []int64 {
	out := make([]int64, len(b)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

func tokenizer(t *testing.T, lower bool) *text.Tokenizer {
	t.Helper()
	tok, err := text.NewTokenizer(text.BuiltinVocab(), text.WordPieceOptions{Lowercase: lower, StripAccents: lower})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTextWordPieceBuiltin(t *testing.T) {
	p := lookup(t, "text-wordpiece")
	tok := tokenizer(t, true)
	const sentence = "The Café served forty-two cups of coffee, quickly!"
	wantIDs, wantMask := tok.Encode(sentence, 128)
	for _, s := range []wds.Sample{
		{Key: "tar", Files: map[string][]byte{"txt": []byte(sentence)}},
		{Key: "line", Files: map[string][]byte{"jsonl": []byte(`{"id": 3, "text": "The Café served forty-two cups of coffee, quickly!"}`)}},
		{Key: "doc", Files: map[string][]byte{"json": []byte(`{"text": "The Café served forty-two cups of coffee, quickly!"}`)}},
	} {
		out := run(t, p, s, 1)
		if diff := cmp.Diff([]string{"input_ids I32[128] 512", "attention_mask I32[128] 512"}, shapes(out)); diff != "" {
			t.Fatalf("%s: fields (-want +got):\n%s", s.Key, diff)
		}
		ids, mask := int32s(out.Fields[0].Data), int32s(out.Fields[1].Data)
		if !cmp.Equal(ids, wantIDs) || !cmp.Equal(mask, wantMask) {
			t.Errorf("%s: ids %v, want %v", s.Key, ids[:16], wantIDs[:16])
		}
		cls, _ := tok.Vocab().ID(text.ClsToken)
		if ids[0] != cls || mask[0] != 1 || mask[127] != 0 {
			t.Errorf("%s: row does not start with [CLS] and end in padding", s.Key)
		}
	}
}

func TestWordPiecePackAndOptions(t *testing.T) {
	dir := t.TempDir()
	vocab := filepath.Join(dir, "vocab.txt")
	if err := os.WriteFile(vocab, []byte("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Lookup("label: {field: label}\nops:\n  - {op: text, source: jsonl, field: sentences}\n"+
		"  - {op: wordpiece, vocab: vocab.txt, lowercase: false, strip_accents: false, max_len: 8, mode: pack}\n", Options{VocabDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := wds.Sample{Key: "k", Files: map[string][]byte{"jsonl": []byte(`{"sentences": ["hello worlds", "Hello", "world world world"], "label": 4}`)}}
	out := run(t, p, s, 1)
	if diff := cmp.Diff([]string{"input_ids I32[8] 32", "attention_mask I32[8] 32", "segment_ids I32[8] 32", "label I64[] 8"}, shapes(out)); diff != "" {
		t.Fatalf("fields (-want +got):\n%s", diff)
	}
	// [CLS] hello world ##s [SEP] [UNK] (cased "Hello") [SEP] leaves room
	// for no token of the third segment, so it is dropped.
	want := struct{ IDs, Mask, Seg []int32 }{
		IDs:  []int32{2, 5, 6, 7, 3, 1, 3, 0},
		Mask: []int32{1, 1, 1, 1, 1, 1, 1, 0},
		Seg:  []int32{1, 1, 1, 1, 1, 2, 2, 0},
	}
	got := struct{ IDs, Mask, Seg []int32 }{int32s(out.Fields[0].Data), int32s(out.Fields[1].Data), int32s(out.Fields[2].Data)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("packed row (-want +got):\n%s", diff)
	}
	if l := int64s(out.Fields[3].Data)[0]; l != 4 {
		t.Errorf("label %d, want 4", l)
	}
	// Pack mode on plain text: its non-blank lines are the segments.
	tok := tokenizer(t, true)
	p = spec(t, "ops: [text, {op: wordpiece, max_len: 32, mode: pack}]")
	out = run(t, p, wds.Sample{Key: "t", Files: map[string][]byte{"txt": []byte("first line here\n\n  second one\n")}}, 1)
	ids, _, seg, _ := tok.Pack([]string{"first line here", "second one"}, 32)
	if !cmp.Equal(int32s(out.Fields[0].Data), ids) || !cmp.Equal(int32s(out.Fields[2].Data), seg) {
		t.Errorf("packed lines: ids %v, want %v", int32s(out.Fields[0].Data), ids)
	}
}

// A JSON object without the label field (or with a null one) is an
// unlabelled sample: label NoLabel, not a failure.
func TestTextMissingLabel(t *testing.T) {
	labelled := spec(t, "label: {field: label}\nops: [{op: text, source: jsonl}, wordpiece]")
	for _, line := range []string{`{"text": "a"}`, `{"text": "a", "label": null}`} {
		out := run(t, labelled, wds.Sample{Key: "x", Files: map[string][]byte{"jsonl": []byte(line)}}, 1)
		f := out.Fields[len(out.Fields)-1]
		if f.Name != "label" || int64(binary.LittleEndian.Uint64(f.Data)) != NoLabel {
			t.Errorf("%s: last field %s %v, want label %d", line, f.Name, f.Data, NoLabel)
		}
	}
}

func TestTextBadSamples(t *testing.T) {
	p := lookup(t, "text-wordpiece")
	jsonField := spec(t, "ops: [{op: text, source: jsonl, field: body}, wordpiece]")
	labelled := spec(t, "label: {field: label}\nops: [{op: text, source: jsonl}, wordpiece]")
	for _, c := range []struct {
		p    Pipeline
		s    map[string][]byte
		want string
	}{
		{p, map[string][]byte{"cls": []byte("1")}, "no text member (want txt, or a text field in jsonl or json; sample has cls)"},
		{p, map[string][]byte{"jsonl": []byte(`{"title": "x"}`)}, `member jsonl has no field "text" (it has title)`},
		{p, map[string][]byte{"jsonl": []byte(`[1, 2]`)}, "member jsonl: want a JSON object"},
		{p, map[string][]byte{"jsonl": []byte(`{"text": 7}`)}, "member jsonl field text 7: want a string or a list of strings"},
		{jsonField, map[string][]byte{"txt": []byte("hi")}, "no jsonl member (sample has txt)"},
		{labelled, map[string][]byte{"jsonl": []byte(`{"text": "a", "label": "cat"}`)}, `member jsonl field label "cat": want an integer class label`},
	} {
		_, err := c.p.Process(wds.Sample{Key: "x", Files: c.s}, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.s, err, c.want)
		}
	}
}

// criteoLine builds a 40-column line: label, 13 dense, 26 categorical.
func criteoLine(label string, dense []string, cats []string) []byte {
	cols := append([]string{label}, dense...)
	cols = append(cols, cats...)
	return []byte(strings.Join(cols, "\t"))
}

func TestCriteoBuiltin(t *testing.T) {
	dense := []string{"1", "", "5", "0", "1382", "4", "15", "2", "181", "1", "2", "", "2"}
	cats := []string{"68fd1e64", "80e26c9b", "fb936136", "7b4723c4", "25c83c98", "7e0ccccf", "de7995b8", "1f89b562", "a73ee510", "a8cd5504",
		"b2cb9c98", "37c9c164", "2824a5f6", "1adce6ef", "8ba8b39a", "891b62e7", "e5ba7672", "f54016b9", "21ddcdc9", "b1252a9d",
		"07b5194c", "", "3a171ecb", "c5c50484", "e8b83407", "9727dd16"}
	line := criteoLine("1", dense, cats)
	out := run(t, lookup(t, "criteo"), wds.Sample{Key: "part/00000000", Files: map[string][]byte{"tsv": line}}, 1)
	if diff := cmp.Diff([]string{"label I64[] 8", "dense F32[13] 52", "sparse I64[26] 208"}, shapes(out)); diff != "" {
		t.Fatalf("fields (-want +got):\n%s", diff)
	}
	label, wantDense, wantSparse, err := tabular.ParseCriteo(line, tabular.DefaultCriteoOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := int64s(out.Fields[0].Data)[0]; got != label || label != 1 {
		t.Errorf("label %d, want 1", got)
	}
	for i, w := range wantDense {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out.Fields[1].Data[4*i:])); got != w {
			t.Errorf("dense %d: %v, want %v", i, got, w)
		}
	}
	if got := int64s(out.Fields[2].Data); !cmp.Equal(got, wantSparse[:]) {
		t.Errorf("sparse %v, want %v", got, wantSparse)
	}
	// The documented example: "68fd1e64" is index 430557 of 2^20.
	if got := int64s(out.Fields[2].Data)[0]; got != 430557 {
		t.Errorf("C1 index %d, want 430557", got)
	}

	// Parameters: fill, no log, one bucket count for all.
	p := spec(t, "ops: [{op: criteo, dense_fill: -1, log1p: false, buckets: 1000}]")
	out = run(t, p, wds.Sample{Key: "k", Files: map[string][]byte{"tsv": line}}, 1)
	d := out.Fields[1].Data
	if f := math.Float32frombits(binary.LittleEndian.Uint32(d[4:])); f != -1 {
		t.Errorf("missing I2 filled with %v, want -1", f)
	}
	if f := math.Float32frombits(binary.LittleEndian.Uint32(d[16:])); f != 1382 {
		t.Errorf("I5 without log1p: %v, want 1382", f)
	}
	for i, v := range int64s(out.Fields[2].Data) {
		if v < 0 || v >= 1000 || v != tabular.HashCategorical([]byte(cats[i]), 1000) {
			t.Errorf("C%d index %d, want FNV-1a mod 1000 = %d", i+1, v, tabular.HashCategorical([]byte(cats[i]), 1000))
		}
	}

	// A bad line fails its sample, naming the column.
	_, err = lookup(t, "criteo").Process(wds.Sample{Key: "b", Files: map[string][]byte{"tsv": criteoLine("1", append([]string{"x1"}, dense[1:]...), cats)}}, 1)
	if err == nil || !strings.Contains(err.Error(), `member tsv: column 2 (I1): "x1"`) {
		t.Errorf("bad line: error %v", err)
	}
	_, err = lookup(t, "criteo").Process(wds.Sample{Key: "b", Files: map[string][]byte{"jsonl": bytes.Repeat([]byte("x"), 3)}}, 1)
	if err == nil || !strings.Contains(err.Error(), "no tsv member (sample has jsonl)") {
		t.Errorf("no tsv: error %v", err)
	}
}
