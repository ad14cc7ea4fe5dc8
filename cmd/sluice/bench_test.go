package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/synth"
)

func benchCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCLI(t, append([]string{"bench", "ops"}, args...)...)
}

// TestBenchOpsTarJSON measures a small shard with one corrupt sample: the
// report counts it out, times the rest on one core, and splits the time
// across the pipeline's ops. No assertion is on the speed itself.
func TestBenchOpsTarJSON(t *testing.T) {
	dir := t.TempDir()
	tarPath, shard := imageShard(t, dir, 6, 1)
	code, stdout, stderr := benchCLI(t, "--pipeline", "imagenet-train", "--input", tarPath, "--seconds", "0.05", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	snakeKeys(t, stdout)
	var rep benchReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
	if rep.Pipeline != "imagenet-train" || rep.Decoder != image.Decoder || rep.Input != tarPath {
		t.Errorf("report names pipeline %q, decoder %q, input %q", rep.Pipeline, rep.Decoder, rep.Input)
	}
	if rep.Samples != 6 || rep.Failed != 1 || !strings.Contains(rep.FirstFailure, shard.Corrupt[0]) {
		t.Errorf("samples %d, failed %d (%q): want 6 and 1, naming %s", rep.Samples, rep.Failed, rep.FirstFailure, shard.Corrupt[0])
	}
	if rep.Processed < 5 || rep.Processed%5 != 0 {
		t.Errorf("processed %d: want whole passes over the 5 good samples", rep.Processed)
	}
	if rep.Seconds <= 0 || rep.SamplesPerSPerCore <= 0 || rep.NsPerSample <= 0 ||
		math.Abs(rep.SamplesPerSPerCore*rep.NsPerSample-1e9) > 1e3 {
		t.Errorf("rate %.1f/s, %.0f ns/sample over %.3fs: want positive and consistent", rep.SamplesPerSPerCore, rep.NsPerSample, rep.Seconds)
	}
	// Each sample allocates at least its 224x224x3 output.
	if rep.BytesAllocPerSample < 224*224*3 || rep.AllocsPerSample < 1 {
		t.Errorf("%.0f bytes in %.1f allocations per sample", rep.BytesAllocPerSample, rep.AllocsPerSample)
	}
	var names []string
	share := 0.0
	for _, o := range rep.Ops {
		names = append(names, o.Op)
		share += o.Share
		if o.NsPerSample < 0 {
			t.Errorf("op %s: %.0f ns", o.Op, o.NsPerSample)
		}
	}
	if diff := cmp.Diff([]string{"decode", "random_resized_crop", "random_horizontal_flip", "to_uint8_hwc"}, names); diff != "" {
		t.Errorf("ops (-want +got):\n%s", diff)
	}
	if math.Abs(share-1) > 1e-6 {
		t.Errorf("op shares sum to %f", share)
	}
	if rep.Ops[0].NsPerSample == 0 || rep.Ops[1].NsPerSample == 0 {
		t.Errorf("decode and crop took no time: %+v", rep.Ops)
	}
}

// TestBenchOpsDirectory reads a directory of KEY.jpg/KEY.cls files, as
// bench/compare.sh passes, and prints the human report.
func TestBenchOpsDirectory(t *testing.T) {
	dir := t.TempDir()
	shards, err := synth.Images(synth.ImageOptions{Samples: 3, Shards: 1, Seed: 2, MinSide: 300, MaxSide: 400, Quality: 90, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "shard.tar")
	if err := os.WriteFile(tarPath, shards[0].Data, 0o644); err != nil {
		t.Fatal(err)
	}
	samples, err := benchSamples(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	files := filepath.Join(dir, "files")
	if err := os.Mkdir(files, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		for ext, b := range s.Files {
			if err := os.WriteFile(filepath.Join(files, s.Key+"."+ext), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fromDir, err := benchSamples(files)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(samples, fromDir); diff != "" {
		t.Fatalf("directory samples differ from the shard's (-shard +dir):\n%s", diff)
	}

	code, stdout, stderr := benchCLI(t, "--pipeline", "imagenet-eval", "--input", files, "--seconds", "0.02")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"pipeline imagenet-eval, decoder " + image.Decoder, "3 samples", "samples/s per core", "per op:", "center_crop"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestBenchOpsBadInput(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.jpg"), []byte("not a jpeg"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.cls"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--pipeline", "imagenet-train"}, 2, []string{"--input is required"}},
		{[]string{"--input", dir, "--seconds", "0"}, 2, []string{"--seconds 0: want more than 0"}},
		{[]string{"--input", dir, "--pipeline", "no-such"}, 1, []string{`--pipeline "no-such" is neither a built-in pipeline (criteo, imagenet-eval`}},
		{[]string{"--input", filepath.Join(dir, "missing")}, 1, []string{"reading input"}},
		{[]string{"--input", dir, "--seconds", "0.01"}, 1, []string{"every sample failed", "sample a", "unrecognised image format"}},
		{[]string{"--input", t.TempDir()}, 1, []string{"holds no samples"}},
	} {
		code, _, stderr := benchCLI(t, c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", c.args, stderr, w)
			}
		}
	}
}
