package main

import (
	"context"
	"encoding/json"
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

// TestDemoLM: the lm dataset through lm-pretrain (synth's byte tokenizer
// in the replicas' vocab directory): every packed row of every epoch
// delivered once, none lost, and the summary says OK.
func TestDemoLM(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run")
	}
	t.Setenv(replicaEnv, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb strings.Builder
	code := run(ctx, []string{"demo", "--dataset", "lm", "--samples", "300", "--shards", "3", "--epochs", "2", "--step-time", "0s", "--json"}, &out, &errb)
	var s struct {
		Expected   int64 `json:"samples_expected"`
		Delivered  int64 `json:"samples_delivered"`
		Lost       int64 `json:"lost"`
		Duplicates int64 `json:"duplicates"`
	}
	if err := json.Unmarshal([]byte(out.String()), &s); err != nil {
		t.Fatalf("exit %d, summary %q: %v (stderr %s)", code, out.String(), err, errb.String())
	}
	// 300 documents of 50-500 bytes: tens of rows of 2048 an epoch, not 300.
	if code != 0 || s.Expected != s.Delivered || s.Lost != 0 || s.Duplicates != 0 || s.Expected >= 2*300 || s.Expected == 0 {
		t.Errorf("exit %d, summary %+v: want every row delivered once (stderr %s)", code, s, errb.String())
	}
}
