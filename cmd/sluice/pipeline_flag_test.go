package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-project/sluice/functions/pipeline"
)

// TestPipelineFlag: --pipeline takes a built-in name, a spec file, a pipe
// or an inline spec, and otherwise says it is neither a built-in (naming
// them) nor a readable file, with the reason in a few words.
func TestPipelineFlag(t *testing.T) {
	dir := t.TempDir()
	const doc = "name: piped\nops: [decode, {op: center_crop, size: 32}, to_uint8_hwc]\n"
	file := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "spec.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() { // a pipe, as <(...) gives one
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		f.WriteString(doc)
		f.Close()
	}()
	for _, tc := range []struct{ value, name, doc string }{
		{"imagenet-eval", "imagenet-eval", ""},
		{file, "piped", doc},
		{fifo, "piped", doc},
		{`{"ops": ["decode", "to_uint8_hwc"]}`, "custom", `{"ops": ["decode", "to_uint8_hwc"]}`},
	} {
		p, gotDoc, err := loadPipelineFlag(tc.value, pipeline.Options{})
		if err != nil {
			t.Errorf("%s: %v", tc.value, err)
			continue
		}
		if p.Name() != tc.name || gotDoc != tc.doc {
			t.Errorf("%s: pipeline %q, doc %q; want %q, %q", tc.value, p.Name(), gotDoc, tc.name, tc.doc)
		}
	}

	builtins := "neither a built-in pipeline (criteo, imagenet-eval, imagenet-train, lm-pretrain, text-wordpiece) nor a readable spec file"
	for _, tc := range []struct{ value, want string }{
		{"nosuch", `--pipeline "nosuch" is ` + builtins + " (no such file or directory)"},
		{dir, builtins + " (is a directory)"},
	} {
		_, _, err := loadPipelineFlag(tc.value, pipeline.Options{})
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one ending %q", tc.value, err, tc.want)
		}
	}

	// Each command that takes --pipeline says so.
	for _, args := range [][]string{
		{"fn", "apply", "--pipeline", "nosuch", "--input", dir, "--output", filepath.Join(dir, "out")},
		{"demo", "--pipeline", "nosuch"},
		{"bench", "ops", "--pipeline", "nosuch", "--input", dir},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != 1 || !strings.Contains(stderr, `--pipeline "nosuch" is `+builtins) || strings.Contains(stderr, "open nosuch") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
