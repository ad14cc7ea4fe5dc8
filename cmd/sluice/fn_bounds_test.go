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
