package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// problems returns the problem lines of a *ValidationError.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v: want a *ValidationError", err)
	}
	var out []string
	for _, p := range ve.Problems {
		out = append(out, p.String())
	}
	return out
}

func TestValidationReportsEveryProblemWithItsPosition(t *testing.T) {
	doc := `name: broken
ops:
  - decode
  - op: colour_jitter
  - op: color_jitter
    brightness: 3
    hue: 0.1
  - op: wordpiece
  - op: normalize
    dtype: f64
    std: [0.2, 0, 0.2]
    mean: [1, 2]
  - op: random_resized_crop
    scale: [0.9, 0.1]
    size: 22.5
`
	p, err := Parse([]byte(doc), Options{})
	if p != nil {
		t.Fatal("an invalid spec built a pipeline")
	}
	want := []string{
		`line 4: ops[1] (colour_jitter): unknown op "colour_jitter" (did you mean color_jitter?)`,
		`line 6: ops[2] (color_jitter): brightness 3: want 0..1`,
		`line 7: ops[2] (color_jitter): unknown parameter "hue": color_jitter takes brightness, contrast, saturation`,
		`line 8: ops[3] (wordpiece): takes text, but ops[2] (color_jitter) gives image_u8`,
		`line 9: ops[4] (normalize): takes encoded_image or image_u8, but ops[3] (wordpiece) gives tokens`,
		`line 10: ops[4] (normalize): dtype "f64": want one of f32, f16`,
		`line 11: ops[4] (normalize): std [0.2, 0, 0.2]: want each > 0`,
		`line 12: ops[4] (normalize): mean [1, 2]: want a list of 3 numbers, got 2`,
		`line 13: ops[5] (random_resized_crop): takes encoded_image or image_u8, but ops[4] (normalize) gives tensor_f32_chw`,
		`line 13: ops[5] (random_resized_crop): the pipeline ends with image_u8, which is not a tensor: end it with normalize or to_uint8_hwc`,
		`line 14: ops[5] (random_resized_crop): scale [0.9, 0.1]: want 0 < min <= max <= 1`,
		`line 15: ops[5] (random_resized_crop): size 22.5: want an integer`,
	}
	if diff := cmp.Diff(want, problems(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, `invalid pipeline "broken" (12 problems):`) || !strings.Contains(msg, "\n  line 6: ops[2] (color_jitter): brightness 3: want 0..1\n") {
		t.Errorf("error text:\n%s", msg)
	}
}

func TestValidationOfDocumentAndLabel(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		want      []string
	}{
		{"structure", "ops:\n  - decode\n  - resize\nlabel: {member: cls, field: x}\nextra: 1\n", []string{
			`line 3: ops[1] (resize): the pipeline ends with image_u8, which is not a tensor: end it with normalize or to_uint8_hwc`,
			`line 4: label: member and field both set: want none, {member: NAME} or {field: NAME}`,
			`line 5: unknown key "extra": a pipeline spec has name, doc, label and ops`,
		}},
		{"no ops", "name: x\n", []string{`ops: want at least one op`}},
		{"empty ops", "ops: []\n", []string{`ops: want at least one op`}},
		{"op without name", "ops:\n  - size: 3\n  - 17\n", []string{
			`line 2: ops[0]: missing op: want op: NAME`,
			`line 3: ops[1]: want an op name or a mapping with op and its parameters`,
		}},
		{"label word", "ops: [criteo]\nlabel: cls\n", []string{
			`line 2: label: "cls": want none, {member: NAME} or {field: NAME}`,
		}},
		{"label key", "ops: [criteo]\nlabel: {column: 3}\n", []string{
			`line 2: label: unknown key "column": want none, {member: NAME} or {field: NAME}`,
		}},
		{"label clash", "ops: [criteo]\nlabel: {member: cls}\n", []string{
			`line 2: label: the pipeline's ops already output a label field; set label: none`,
		}},
		{"first op", "ops:\n  - {op: wordpiece, max_len: 1}\n", []string{
			`line 2: ops[0] (wordpiece): takes text, but the pipeline's input is a sample (put text before it)`,
			`line 2: ops[0] (wordpiece): max_len 1: want 2..65536`,
		}},
		{"vocab outside the vocab directory", "ops:\n  - text\n  - {op: wordpiece, vocab: /nonexistent/vocab.txt}\n", []string{
			`line 3: ops[1] (wordpiece): vocab "/nonexistent/vocab.txt": want builtin or a file name within the replica's vocab directory (--vocab-dir), such as bert-base-uncased.txt`,
		}},
		{"wrong types", "ops:\n  - {op: decode, member: 3}\n  - {op: random_horizontal_flip, p: yes}\n  - {op: to_uint8_hwc, size: 3}\n", []string{
			`line 2: ops[0] (decode): member 3: want a string`,
			`line 3: ops[1] (random_horizontal_flip): p "yes": want a number`,
			`line 4: ops[2] (to_uint8_hwc): unknown parameter "size": to_uint8_hwc takes none`,
		}},
		{"buckets", "ops:\n  - {op: criteo, buckets: [1, 2, 3]}\n  - {op: criteo, buckets: 0}\n", []string{
			`line 2: ops[0] (criteo): buckets [1, 2, 3]: want 1 or 26 bucket counts, got 3`,
			`line 3: ops[1] (criteo): takes sample, but ops[0] (criteo) gives tabular`,
			`line 3: ops[1] (criteo): buckets 0: want each in 1..4611686018427387904`,
		}},
	} {
		_, err := Lookup(c.doc, Options{})
		if diff := cmp.Diff(c.want, problems(t, err)); diff != "" {
			t.Errorf("%s: problems (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestLabelNone(t *testing.T) {
	for _, doc := range []string{"ops: [criteo]\nlabel: none\n", "ops: [criteo]\nlabel:\n", "ops: [criteo]\n"} {
		if _, err := Lookup(doc, Options{}); err != nil {
			t.Errorf("%q: %v", doc, err)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"ops: [decode\n", "not valid YAML: yaml: line 1"},
		{"{\"ops\": [}", "not valid JSON: line 1: invalid character '}'"},
		{"{\n\"ops\": [\"decode\",\n]\n}", "not valid JSON: line 3"},
		{"ops: x\n", "line 1: ops: want a list of ops"},
		{"- decode\n", "line 1: pipeline spec: want a mapping"},
	} {
		_, err := Lookup(c.doc, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.doc, err, c.want)
		}
	}
	if _, err := Parse([]byte("  \n"), Options{}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty spec: error %v", err)
	}
}

func TestJSONSpecThroughLookup(t *testing.T) {
	ss, _ := samples(t, 3, 0)
	spec := `{"name": "tiny", "label": {"member": "cls"},
	 "ops": [{"op": "decode"}, {"op": "resize", "size": 40}, {"op": "center_crop", "size": 32},
	         {"op": "normalize", "dtype": "f16"}]}`
	p, err := Lookup(spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "tiny" {
		t.Errorf("Name() = %q", p.Name())
	}
	out, err := p.Process(ss[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	got := shapes(out)
	want := []string{"image F16[3 32 32] 6144", "label I64[] 8"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	// Multi-line JSON keeps line numbers, tabs and all.
	_, err = Lookup("{\n\t\"ops\": [\n\t\t{\"op\": \"decode\"},\n\t\t{\"op\": \"flip\"}\n\t]\n}", Options{})
	if diff := cmp.Diff([]string{`line 4: ops[1] (flip): unknown op "flip": known ops are decode, random_resized_crop, resize, center_crop, random_horizontal_flip, color_jitter, normalize, to_uint8_hwc, text, wordpiece, bpe, pack, criteo`}, problems(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// shapes describes an output's fields as "name DTYPE[shape] bytes".
func shapes(o Output) []string {
	var s []string
	for _, f := range o.Fields {
		s = append(s, fmt.Sprintf("%s %s%v %d", f.Name, f.DType, f.Shape, len(f.Data)))
	}
	return s
}

func TestLoadFileAndBuiltinsAsDocuments(t *testing.T) {
	dir := t.TempDir()
	yml := filepath.Join(dir, "train.yaml")
	doc := `# the imagenet-train recipe, spelt out
name: my-train
label: {member: cls}
ops:
  - decode
  - op: random_resized_crop
    size: 224
  - op: random_horizontal_flip
    p: 0.5
  - to_uint8_hwc
`
	if err := os.WriteFile(yml, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	mine, err := LoadFile(yml, Options{})
	if err != nil {
		t.Fatal(err)
	}
	builtin := lookup(t, "imagenet-train")
	ss, _ := samples(t, 4, 0)
	for _, s := range ss {
		a, err := mine.Process(s, SampleSeed(5, 1, s.Key))
		if err != nil {
			t.Fatal(err)
		}
		b, err := builtin.Process(s, SampleSeed(5, 1, s.Key))
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(a, b) {
			t.Errorf("%s: the spelt-out spec and the built-in differ", s.Key)
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("ops:\n  - decode\n  - resise\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadFile(bad, Options{})
	if err == nil || !strings.Contains(err.Error(), bad+`: invalid pipeline "custom"`) || !strings.Contains(err.Error(), `line 3: ops[1] (resise): unknown op "resise" (did you mean resize?)`) {
		t.Errorf("bad file: error %v", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.yaml"), Options{}); err == nil || !strings.Contains(err.Error(), "reading pipeline spec") {
		t.Errorf("missing file: error %v", err)
	}
}

func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, op := range Ops() {
		if seen[op.Name] {
			t.Errorf("op %s registered twice", op.Name)
		}
		seen[op.Name] = true
		if op.Doc == "" || len(op.In) == 0 || op.build == nil {
			t.Errorf("op %s: incomplete spec", op.Name)
		}
		// Every default is valid, so an op with no parameters set builds
		// (unless one of them is required).
		for _, p := range op.Params {
			if p.Doc == "" {
				t.Errorf("op %s param %s: no doc", op.Name, p.Name)
			}
			if _, err := p.convert(p.Default); err != nil {
				t.Errorf("op %s param %s: default %v: %v", op.Name, p.Name, p.Default, err)
			}
		}
		required := slices.ContainsFunc(op.Params, func(p Param) bool { return p.Required })
		if _, err := op.build(defaults(op), Options{}); err != nil && !required {
			t.Errorf("op %s with defaults: %v", op.Name, err)
		}
	}
	// lm-pretrain reads tokenizer.json from the vocab directory.
	dir := tokenizerDir(t)
	if err := os.Rename(filepath.Join(dir, "tiny.json"), filepath.Join(dir, LMPretrainTokenizer)); err != nil {
		t.Fatal(err)
	}
	for _, d := range Builtins() {
		if d.Doc == "" {
			t.Errorf("built-in %s: no doc", d.Name)
		}
		if _, err := Build(d, Options{VocabDir: dir}); err != nil {
			t.Errorf("built-in %s: %v", d.Name, err)
		}
	}
	p, err := Lookup("imagenet-eval", Options{})
	if err != nil {
		t.Fatal(err)
	}
	prof, ok := p.(Profiler)
	if !ok {
		t.Fatal("pipelines do not implement Profiler")
	}
	if diff := cmp.Diff([]string{"decode", "resize", "center_crop", "to_uint8_hwc"}, prof.OpNames()); diff != "" {
		t.Errorf("OpNames (-want +got):\n%s", diff)
	}
}

func TestProfiledChargesDecodingToDecode(t *testing.T) {
	ss, _ := samples(t, 2, 0)
	p := lookup(t, "imagenet-train").(Profiler)
	spent := make([]time.Duration, len(p.OpNames()))
	out, err := p.ProcessProfiled(ss[0], 1, spent)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := p.Process(ss[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(out, plain) {
		t.Error("profiled output differs")
	}
	// Decoding dwarfs flipping; both are timed.
	if spent[0] <= 0 || spent[1] <= 0 || spent[3] <= 0 {
		t.Errorf("spent %v: want time for every op", spent)
	}
}

func TestParamsFromGo(t *testing.T) {
	// Definitions built in Go may use Go types; a float where an int is
	// wanted is caught just the same.
	d := Definition{Ops: []OpCall{
		{Op: "decode"},
		{Op: "random_resized_crop", Params: map[string]any{"size": 64.5, "scale": []float64{0.5, 1}, "ratio": []int{1, 1}}},
		{Op: "to_uint8_hwc"},
	}}
	_, err := Build(d, Options{})
	if diff := cmp.Diff([]string{"ops[1] (random_resized_crop): size 64.5: want an integer"}, problems(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	d.Ops[1].Params["size"] = 64
	p, err := Build(d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := samples(t, 1, 0)
	out, err := p.Process(ss[0], 3)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"image U8[64 64 3] 12288"}, shapes(out)); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
}
