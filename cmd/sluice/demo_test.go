package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestDemoFlagErrorsOnlyTheRealOne: an out-of-range --samples is reported
// alone, not with the checks of --shards and --corrupt that depend on it.
func TestDemoFlagErrorsOnlyTheRealOne(t *testing.T) {
	code, _, stderr := runCLI(t, "demo", "--samples", "-5")
	if code != 2 || strings.TrimSpace(stderr) != "sluice demo: --samples -5: want 1..1000000" {
		t.Errorf("exit %d, stderr %q; want 2 and only the --samples error", code, stderr)
	}
	// With --samples valid, the checks bounded by it still apply.
	code, _, stderr = runCLI(t, "demo", "--samples", "10", "--shards", "11", "--corrupt", "11")
	if code != 2 || !strings.Contains(stderr, "--shards 11: want 1..10") || !strings.Contains(stderr, "--corrupt 11: want 0..10") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestDemoHelpSaysJSONL: the text dataset's shards are JSONL.
func TestDemoHelpSaysJSONL(t *testing.T) {
	code, _, stderr := runCLI(t, "demo", "-h")
	if code != 0 || !strings.Contains(stderr, "text (JSONL shards") || strings.Contains(stderr, ".txt") {
		t.Errorf("exit %d, help:\n%s", code, stderr)
	}
}

// TestDemoNothingPreprocessedFails: text shards through imagenet-train
// deliver nothing; the demo says why and exits non-zero instead of "OK".
func TestDemoNothingPreprocessedFails(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run")
	}
	t.Setenv(replicaEnv, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, asJSON := range []bool{false, true} {
		args := []string{"demo", "--dataset", "text", "--pipeline", "imagenet-train", "--samples", "40", "--shards", "2", "--epochs", "1"}
		if asJSON {
			args = append(args, "--json")
		}
		var out, errb strings.Builder
		code := run(ctx, args, &out, &errb)
		// Whether the summary or the job's own state says it: what failed, and why.
		if code != 1 || !strings.Contains(errb.String(), "no sample could be") || !strings.Contains(errb.String(), "no image member") {
			t.Errorf("json %v: exit %d, stderr %q; want 1, no sample could be preprocessed, and why", asJSON, code, errb.String())
		}
		if strings.Contains(out.String(), ": OK") {
			t.Errorf("summary says OK:\n%s", out.String())
		}
		if asJSON && out.Len() > 0 { // a summary; TestReportTypesSnakeCase checks every field of one
			snakeKeys(t, out.String())
		}
	}
}
