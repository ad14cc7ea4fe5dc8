package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/synth"
)

func applyCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"fn", "apply"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// readOutput decodes a written file: its tensors' shapes and its keys.
func readOutput(t *testing.T, path string) (safetensors.File, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := json.Unmarshal([]byte(f.Metadata["keys"]), &keys); err != nil {
		t.Fatalf("keys metadata %q: %v", f.Metadata["keys"], err)
	}
	return f, keys
}

// tensorShapes describes each tensor as "DTYPE[d0,d1,...]".
func tensorShapes(f safetensors.File) map[string]string {
	m := map[string]string{}
	for name, ts := range f.Tensors {
		shape, _ := json.Marshal(ts.Shape)
		m[name] = string(ts.DType) + string(shape)
	}
	return m
}

func imageShard(t *testing.T, dir string, n, corrupt int) (string, synth.Shard) {
	t.Helper()
	shards, err := synth.Images(synth.ImageOptions{Samples: n, Shards: 1, Seed: 4, MinSide: 60, MaxSide: 320, Quality: 85, Classes: 10, Corrupt: corrupt})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "shard-000.tar")
	if err := os.WriteFile(path, shards[0].Data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, shards[0]
}

func TestFnApplyTarShard(t *testing.T) {
	dir := t.TempDir()
	tarPath, shard := imageShard(t, dir, 10, 2)
	out := filepath.Join(dir, "out.safetensors")
	code, stdout, stderr := applyCLI(t, "--pipeline", "imagenet-train", "--input", tarPath, "--output", out, "--seed", "7", "--epoch", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	f, keys := readOutput(t, out)
	if diff := cmp.Diff(map[string]string{"image": "U8[8,224,224,3]", "label": "I64[8]"}, tensorShapes(f)); diff != "" {
		t.Errorf("tensors (-want +got):\n%s", diff)
	}
	if len(keys) != 8 {
		t.Fatalf("keys %v", keys)
	}
	for _, k := range shard.Corrupt {
		if !strings.Contains(stderr, "failed "+k+": member jpg") {
			t.Errorf("stderr does not report corrupt sample %s:\n%s", k, stderr)
		}
		for _, g := range keys {
			if g == k {
				t.Errorf("corrupt sample %s is in the output", k)
			}
		}
	}
	if !strings.Contains(stderr, "2 of 10 samples failed") {
		t.Errorf("stderr lacks the failure count:\n%s", stderr)
	}
	want := map[string]string{"pipeline": "imagenet-train", "seed": "7", "epoch": "3", "failed": "2"}
	for k, v := range want {
		if f.Metadata[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, f.Metadata[k], v)
		}
	}
	if !strings.Contains(stdout, "wrote 8 samples (2 failed) through imagenet-train") {
		t.Errorf("stdout: %s", stdout)
	}
	// Labels are the cls members, in key order.
	r := wds.NewReader(bytes.NewReader(shard.Data), 0)
	cls := map[string]string{}
	for {
		s, err := r.Next()
		if err != nil {
			break
		}
		cls[s.Key] = strings.TrimSpace(string(s.Files["cls"]))
	}
	lbl := f.Tensors["label"].Data
	for i, k := range keys {
		if got := int64(binary.LittleEndian.Uint64(lbl[8*i:])); cls[k] != jsonInt(got) {
			t.Errorf("%s: label %d, cls %s", k, got, cls[k])
		}
	}

	// Same seed and epoch: the same bytes; another epoch: other crops.
	again := filepath.Join(dir, "again.safetensors")
	if code, _, stderr := applyCLI(t, "--pipeline", "imagenet-train", "--input", tarPath, "--output", again, "--seed", "7", "--epoch", "3"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	other := filepath.Join(dir, "other.safetensors")
	if code, _, stderr := applyCLI(t, "--pipeline", "imagenet-train", "--input", tarPath, "--output", other, "--seed", "7", "--epoch", "4"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	c, _ := readOutput(t, other)
	if !bytes.Equal(a, b) {
		t.Error("two runs with the same seed and epoch wrote different files")
	}
	if bytes.Equal(f.Tensors["image"].Data, c.Tensors["image"].Data) {
		t.Error("epochs 3 and 4 gave the same images")
	}
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

func TestFnApplyDirectoryAndSpecFile(t *testing.T) {
	dir := t.TempDir()
	_, shard := imageShard(t, dir, 4, 0)
	in := filepath.Join(dir, "images")
	if err := os.Mkdir(in, 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory of KEY.jpg and KEY.cls files: each key is one sample.
	r := wds.NewReader(bytes.NewReader(shard.Data), 0)
	var want []string
	for {
		s, err := r.Next()
		if err != nil {
			break
		}
		want = append(want, s.Key)
		for ext, data := range s.Files {
			if err := os.WriteFile(filepath.Join(in, s.Key+"."+strings.ToUpper(ext)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(in, "notes.txt"), []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "eval.yaml")
	doc := "name: small-eval\nlabel: {member: cls}\nops:\n  - decode\n  - {op: resize, size: 72}\n  - {op: center_crop, size: 64}\n  - {op: normalize, dtype: f16}\n"
	if err := os.WriteFile(spec, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.safetensors")
	code, _, stderr := applyCLI(t, "--pipeline", spec, "--input", in, "--output", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "failed notes: no image member") {
		t.Errorf("stderr does not report notes.txt:\n%s", stderr)
	}
	f, keys := readOutput(t, out)
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"image": "F16[4,3,64,64]", "label": "I64[4]"}, tensorShapes(f)); diff != "" {
		t.Errorf("tensors (-want +got):\n%s", diff)
	}
	if f.Metadata["pipeline"] != "small-eval" || f.Metadata["pipeline_spec"] != doc {
		t.Errorf("metadata %v", f.Metadata)
	}
}

func TestFnApplyTextAndTabular(t *testing.T) {
	dir := t.TempDir()
	jsonl := filepath.Join(dir, "part-0.jsonl")
	if err := os.WriteFile(jsonl, []byte(`{"text": "the match was won in the final minute", "label": 0}`+"\n\n"+
		`{"text": "rain and wind all afternoon", "label": 1}`+"\n"+`{"title": "no text"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "text.safetensors")
	code, _, stderr := applyCLI(t, "--pipeline", "text-wordpiece", "--input", jsonl, "--output", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	f, keys := readOutput(t, out)
	if diff := cmp.Diff([]string{"part-0/00000000", "part-0/00000002"}, keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"input_ids": "I32[2,128]", "attention_mask": "I32[2,128]"}, tensorShapes(f)); diff != "" {
		t.Errorf("tensors (-want +got):\n%s", diff)
	}
	if !strings.Contains(stderr, `failed part-0/00000003: member jsonl has no field "text"`) {
		t.Errorf("stderr:\n%s", stderr)
	}

	// Labelled text through an inline JSON spec.
	code, _, stderr = applyCLI(t, "--pipeline", `{"label": {"field": "label"}, "ops": ["text", {"op": "wordpiece", "max_len": 16}]}`,
		"--input", jsonl, "--output", out)
	if code != 0 {
		t.Fatalf("inline spec: exit %d: %s", code, stderr)
	}
	f, _ = readOutput(t, out)
	if diff := cmp.Diff(map[string]string{"input_ids": "I32[2,16]", "attention_mask": "I32[2,16]", "label": "I64[2]"}, tensorShapes(f)); diff != "" {
		t.Errorf("tensors (-want +got):\n%s", diff)
	}

	// A directory of .txt files.
	txt := filepath.Join(dir, "docs")
	if err := os.Mkdir(txt, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, s := range []string{"hello world", "coffee and cake"} {
		if err := os.WriteFile(filepath.Join(txt, string(rune('a'+i))+".txt"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := applyCLI(t, "--pipeline", "text-wordpiece", "--input", txt, "--output", out); code != 0 {
		t.Fatalf("txt dir: exit %d: %s", code, stderr)
	}
	if _, keys := readOutput(t, out); !cmp.Equal(keys, []string{"a", "b"}) {
		t.Errorf("txt dir keys %v", keys)
	}

	// Criteo TSV.
	shards, err := synth.Tabular(synth.TabularOptions{Samples: 5, Shards: 1, Seed: 2, MissingRate: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	tsv := filepath.Join(dir, shards[0].Name)
	if err := os.WriteFile(tsv, shards[0].Data, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := applyCLI(t, "--pipeline", "criteo", "--input", tsv, "--output", out); code != 0 {
		t.Fatalf("criteo: exit %d: %s", code, stderr)
	}
	f, _ = readOutput(t, out)
	if diff := cmp.Diff(map[string]string{"label": "I64[5]", "dense": "F32[5,13]", "sparse": "I64[5,26]"}, tensorShapes(f)); diff != "" {
		t.Errorf("criteo tensors (-want +got):\n%s", diff)
	}
}

func TestFnApplyFailures(t *testing.T) {
	dir := t.TempDir()
	tarPath, _ := imageShard(t, dir, 3, 0)
	out := filepath.Join(dir, "out.safetensors")

	// An invalid spec: every problem printed, nothing written.
	spec := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(spec, []byte("ops:\n  - decode\n  - {op: color_jitter, brightness: 3}\n  - {op: wordpiece}\n  - nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := applyCLI(t, "--pipeline", spec, "--input", tarPath, "--output", out)
	if code != 1 {
		t.Errorf("invalid spec: exit %d, want 1", code)
	}
	for _, w := range []string{
		"line 3: ops[1] (color_jitter): brightness 3: want 0..1",
		"line 4: ops[2] (wordpiece): takes text, but ops[1] (color_jitter) gives image_u8",
		`line 5: ops[3] (nope): unknown op "nope"`,
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an invalid spec wrote output")
	}

	// Nothing succeeds: exit 1, nothing written.
	code, _, stderr = applyCLI(t, "--pipeline", "criteo", "--input", tarPath, "--output", out)
	if code != 1 || !strings.Contains(stderr, "no sample of "+tarPath+" succeeded (3 failed)") {
		t.Errorf("nothing succeeded: exit %d, stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a run where nothing succeeded wrote output")
	}

	// Unknown pipeline names, missing flags.
	code, _, stderr = applyCLI(t, "--pipeline", "resnet-magic", "--input", tarPath, "--output", out)
	if code != 1 || !strings.Contains(stderr, `--pipeline "resnet-magic" is neither a built-in pipeline (criteo, imagenet-eval, imagenet-train, lm-pretrain, text-wordpiece) nor a readable spec file (no such file or directory)`) {
		t.Errorf("unknown pipeline: exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = applyCLI(t, "--epoch", "-1")
	if code != 2 {
		t.Errorf("missing flags: exit %d, want 2", code)
	}
	for _, w := range []string{"--pipeline is required", "--input is required", "--output is required", "--epoch -1: want 0..1073741824"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}

	// --limit stops early; --list prints the catalog.
	if code, stdout, stderr := applyCLI(t, "--pipeline", "imagenet-eval", "--input", tarPath, "--output", out, "--limit", "2"); code != 0 || !strings.Contains(stdout, "wrote 2 samples") {
		t.Errorf("--limit 2: exit %d, %s%s", code, stdout, stderr)
	}
	code, stdout, _ := applyCLI(t, "--list")
	if code != 0 || !strings.Contains(stdout, "random_resized_crop (encoded_image | image_u8 -> image_u8)") || !strings.Contains(stdout, "imagenet-eval") {
		t.Errorf("--list: exit %d:\n%s", code, stdout)
	}
}

// labels reads a written file's label tensor by key.
func labels(t *testing.T, path string) map[string]int64 {
	t.Helper()
	f, keys := readOutput(t, path)
	lbl := f.Tensors["label"].Data
	if len(lbl) != 8*len(keys) {
		t.Fatalf("label tensor %d bytes for %d keys", len(lbl), len(keys))
	}
	m := map[string]int64{}
	for i, k := range keys {
		m[k] = int64(binary.LittleEndian.Uint64(lbl[8*i:]))
	}
	return m
}

// jpegs returns n JPEGs of a synthetic shard.
func jpegs(t *testing.T, n int) [][]byte {
	t.Helper()
	_, shard := imageShard(t, t.TempDir(), n, 0)
	r := wds.NewReader(bytes.NewReader(shard.Data), 0)
	var out [][]byte
	for {
		s, err := r.Next()
		if err != nil {
			return out
		}
		out = append(out, s.Files["jpg"])
	}
}

func writeFiles(t *testing.T, root string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFnApplyUnlabelled: a lone JPEG, or a folder of JPEGs without .cls
// members, goes through the built-in image pipelines with label -1.
func TestFnApplyUnlabelled(t *testing.T) {
	dir := t.TempDir()
	imgs := jpegs(t, 3)
	// A hidden folder beside the images does not make it an ImageFolder.
	writeFiles(t, dir, map[string][]byte{"one.jpg": imgs[0], "folder/a.jpg": imgs[1], "folder/b.JPEG": imgs[2],
		"folder/.ipynb_checkpoints/a-checkpoint.jpg": imgs[1]})
	out := filepath.Join(dir, "out.safetensors")
	for _, tc := range []struct {
		input string
		want  map[string]int64
	}{
		{filepath.Join(dir, "one.jpg"), map[string]int64{"one": -1}},
		{filepath.Join(dir, "folder"), map[string]int64{"a": -1, "b": -1}},
	} {
		for _, p := range []string{"imagenet-train", "imagenet-eval"} {
			code, _, stderr := applyCLI(t, "--pipeline", p, "--input", tc.input, "--output", out)
			if code != 0 {
				t.Errorf("%s through %s: exit %d: %s", tc.input, p, code, stderr)
				continue
			}
			if diff := cmp.Diff(tc.want, labels(t, out)); diff != "" {
				t.Errorf("%s through %s: labels (-want +got):\n%s", tc.input, p, diff)
			}
		}
	}
}

// TestFnApplyImageFolder: one subfolder per class gives each image its
// class's index as torchvision's ImageFolder numbers them: every
// subfolder, hidden ones too, sorted by code point.
func TestFnApplyImageFolder(t *testing.T) {
	root := filepath.Join(t.TempDir(), "train")
	imgs := jpegs(t, 7)
	writeFiles(t, root, map[string][]byte{
		"Zebra/z1.jpg":        imgs[0],
		"apple/a1.jpg":        imgs[1],
		"apple/deeper/a2.JPG": imgs[2],
		"apple/notes.txt":     []byte("not an image"),
		"b/b1.jpeg":           imgs[3],
		"banana/b1.jpg":       imgs[4],
		"Äpfel/x.jpg":         imgs[5],
		".hidden/h.jpg":       imgs[6],
		"README.md":           []byte("# a dataset"),
	})
	// A class folder may be a symbolic link.
	linked := filepath.Join(t.TempDir(), "cherries")
	writeFiles(t, linked, map[string][]byte{"c1.png": imgs[0]})
	if err := os.Symlink(linked, filepath.Join(root, "cherry")); err != nil {
		t.Fatal(err)
	}
	// Python: sorted(['Zebra', 'apple', 'b', 'banana', 'cherry', 'Äpfel', '.hidden'])
	// == ['.hidden', 'Zebra', 'apple', 'b', 'banana', 'cherry', 'Äpfel'].
	want := map[string]int64{".hidden/h": 0, "Zebra/z1": 1, "apple/a1": 2, "apple/deeper/a2": 2, "b/b1": 3, "banana/b1": 4, "cherry/c1": 5, "Äpfel/x": 6}
	out := filepath.Join(t.TempDir(), "out.safetensors")
	code, _, stderr := applyCLI(t, "--pipeline", "imagenet-eval", "--input", root, "--output", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if diff := cmp.Diff(want, labels(t, out)); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	for _, w := range []string{"ignoring 1 files beside the class folders", "README.md", "skipped 1 files under the class folders that are not images",
		"class folder .hidden is hidden but counted"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if strings.Contains(stderr, "failed") {
		t.Errorf("stderr reports failures:\n%s", stderr)
	}
}

// TestFnApplyNoSamples: an empty directory (or empty shard) is an error
// that names it and the accepted inputs, not "(0 failed)".
func TestFnApplyNoSamples(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	writeFiles(t, dir, map[string][]byte{"empty/.keep": nil, "empty.jsonl": nil})
	for _, in := range []string{empty, filepath.Join(dir, "empty.jsonl")} {
		code, _, stderr := applyCLI(t, "--pipeline", "imagenet-train", "--input", in, "--output", filepath.Join(dir, "out"))
		if code != 1 || !strings.Contains(stderr, "--input "+in+" holds no samples: want a sample file (image, .txt, .json)") ||
			!strings.Contains(stderr, "ImageFolder") || strings.Contains(stderr, "0 failed") {
			t.Errorf("%s: exit %d, stderr %q", in, code, stderr)
		}
	}
}

// fn apply packs as a replica does: lm-pretrain over a JSONL file, the
// tokenizer.json from --vocab-dir, a line that fails in no row.
func TestFnApplyPacks(t *testing.T) {
	dir := t.TempDir()
	vocab := filepath.Join(dir, "vocab")
	writeFiles(t, vocab, map[string][]byte{"tokenizer.json": synth.ByteTokenizerJSON()})
	var lines strings.Builder
	total := 0
	for i := range 40 {
		text := strings.Repeat(fmt.Sprintf("document %d. ", i), 1+i%7)
		total += len(text) + 1 // its bytes, then EOS
		fmt.Fprintf(&lines, "{\"text\": %q}\n", text)
	}
	lines.WriteString("{\"title\": \"no text\"}\n")
	jsonl := filepath.Join(dir, "web-00.jsonl")
	writeFiles(t, dir, map[string][]byte{"web-00.jsonl": []byte(lines.String())})
	out := filepath.Join(dir, "out.safetensors")
	code, _, stderr := applyCLI(t, "--pipeline", "lm-pretrain", "--vocab-dir", vocab, "--input", jsonl, "--output", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rows := (total + 2047) / 2048
	f, keys := readOutput(t, out)
	want := map[string]string{"input_ids": fmt.Sprintf("I32[%d,2048]", rows), "position_ids": fmt.Sprintf("I32[%d,2048]", rows),
		"attention_mask": fmt.Sprintf("I32[%d,2048]", rows), "cu_seqlens": fmt.Sprintf("I32[%d,2049]", rows), "num_seqs": fmt.Sprintf("I32[%d]", rows)}
	if diff := cmp.Diff(want, tensorShapes(f)); diff != "" {
		t.Errorf("tensors (-want +got):\n%s", diff)
	}
	if len(keys) != rows || keys[0] != "web-00/row00000000" {
		t.Errorf("keys %v: want %d rows from web-00/row00000000", keys, rows)
	}
	if !strings.Contains(stderr, `failed web-00/00000040: member jsonl has no field "text"`) || !strings.Contains(stderr, "1 of 41 samples failed") ||
		!strings.Contains(stderr, fmt.Sprintf("packed 40 documents (%d tokens) into %d rows, %d padding tokens", total, rows, rows*2048-total)) {
		t.Errorf("stderr %q: want the failed line and the packing's counts", stderr)
	}
}
