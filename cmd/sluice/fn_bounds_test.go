package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/hostile"
)

// A 25 KB tar whose one sample is 12 sparse members of 60 MiB once made
// fn apply take 778 MB: the sample is reported as failed, unread, and the
// shard's other samples are written.
func TestFnApplySparseTarSampleIsReportedAndSkipped(t *testing.T) {
	dir := t.TempDir()
	tarPath, _ := imageShard(t, dir, 6, 0)
	good, err := os.ReadFile(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	bomb := hostile.SparseTar("zz-sparse", 12, 60<<20, false)
	if err := os.WriteFile(tarPath, append(slices.Clone(good[:len(good)-1024]), bomb...), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.safetensors")
	code, _, stderr := applyCLI(t, "--pipeline", "imagenet-eval", "--input", tarPath, "--output", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "failed zz-sparse: member zz-sparse.m0 is a sparse file (GNU sparse header): a corrupt sample\n1 of 7 samples failed\n"; stderr != want {
		t.Fatalf("stderr %q, want %q", stderr, want)
	}
	if _, keys := readOutput(t, out); len(keys) != 6 {
		t.Fatalf("%d samples written, want 6", len(keys))
	}
}

func TestFnApplySampleCapFlags(t *testing.T) {
	dir := t.TempDir()
	tarPath, _ := imageShard(t, dir, 3, 0)
	out := filepath.Join(dir, "out.safetensors")
	code, _, stderr := applyCLI(t, "--pipeline", "imagenet-eval", "--input", tarPath, "--output", out, "--max-sample-bytes", "100")
	if code == 0 || !strings.Contains(stderr, "over the 100-byte per-sample cap") {
		t.Fatalf("--max-sample-bytes 100: exit %d: %s", code, stderr)
	}
	code, _, stderr = applyCLI(t, "--pipeline", "imagenet-eval", "--input", tarPath, "--output", out, "--max-sample-members", "1")
	if code == 0 || !strings.Contains(stderr, "more than 1 members, over the per-sample cap") {
		t.Fatalf("--max-sample-members 1: exit %d: %s", code, stderr)
	}
}

// A 16-bit PNG that compresses a thousandfold once took fn apply 1.48 GB:
// its decoding is counted at its real cost and refused, naming its size,
// when it is over the decode budget --memory-limit gives.
func TestFnApplyImageOverTheDecodeBudgetIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.png")
	if err := os.WriteFile(path, hostile.PNG16(3000, 3000), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.safetensors")
	code, _, stderr := applyCLI(t, "--pipeline", "imagenet-eval", "--input", path, "--output", out, "--memory-limit", "128MiB")
	want := "failed big: member png: 3000x3000 image: decoding takes 94.4 MiB, over the 64.0 MiB decode budget\n"
	if code == 0 || !strings.HasPrefix(stderr, want) {
		t.Fatalf("exit %d, stderr %q; want it to start %q", code, stderr, want)
	}
	code, _, stderr = applyCLI(t, "--pipeline", "imagenet-eval", "--input", path, "--output", out, "--memory-limit", "256MiB")
	if code != 0 {
		t.Fatalf("--memory-limit 256MiB: exit %d: %s", code, stderr)
	}
	code, _, stderr = applyCLI(t, "--pipeline", "imagenet-eval", "--input", path, "--output", out, "--memory-limit", "64MiB")
	if code == 0 || !strings.Contains(stderr, `--memory-limit "64MiB": want at least 128.0 MiB`) {
		t.Fatalf("--memory-limit 64MiB: exit %d: %s", code, stderr)
	}
}

// fn apply reads vocab files only from --vocab-dir.
func TestFnApplyVocabDir(t *testing.T) {
	dir := t.TempDir()
	vocabs := filepath.Join(dir, "vocabs")
	if err := os.Mkdir(vocabs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vocabs, "tiny.txt"), []byte("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(input, []byte("hello there\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := "ops: [text, {op: wordpiece, vocab: tiny.txt, max_len: 8}]"
	out := filepath.Join(dir, "out.safetensors")
	if code, _, stderr := applyCLI(t, "--pipeline", spec, "--input", input, "--output", out, "--vocab-dir", vocabs); code != 0 {
		t.Fatalf("--vocab-dir: exit %d: %s", code, stderr)
	}
	code, _, stderr := applyCLI(t, "--pipeline", spec, "--input", input, "--output", out)
	if code == 0 || !strings.Contains(stderr, `vocab "tiny.txt": no vocab directory is set (--vocab-dir), so only builtin is read`) {
		t.Fatalf("without --vocab-dir: exit %d: %s", code, stderr)
	}
}
