package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// traceJobs writes a job list of eight jobs: two input-bound, six fed.
func traceJobs(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("cluster: {cores: 512, gpus: 8}\njobs:\n")
	for i := range 8 {
		// Needs 10 cores, has 2 less 1 for its trainer; needs 1, has 15.
		demand := "cores: 2, trainer_rate: 1000, cpu_s_per_sample: 0.01"
		if i%4 != 0 {
			demand = "cores: 16, trainer_rate: 200, cpu_s_per_sample: 0.005"
		}
		fmt.Fprintf(&b, "  - {name: j%d, start_s: %d, gpus: 1, %s, samples: %d}\n", i, 10*i, demand, 20000*(1+i%3))
	}
	path := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadtestTraceClassesAndShares(t *testing.T) {
	jobs := traceJobs(t)
	code, out, errs := runCLI(t, "loadtest", "trace", "--jobs", jobs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"input-bound under static", "\ninput-bound  2 ", "\nall          8 "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "input-bound share") {
		t.Errorf("a job list printed the share table without --shares:\n%s", out)
	}
	code, out, errs = runCLI(t, "loadtest", "trace", "--jobs", jobs, "--shares", "0,50,100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"| 0% | 0.0% (0) | n/a |", "| 50% | 50.0% (4) |", "| 100% | 100.0% (8) |",
		"GoldMiner's 2.5x JCT, all tasks: ", "GoldMiner's 2.1x GPU utilisation, all tasks: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestLoadtestTraceSharesJSON(t *testing.T) {
	code, out, errs := runCLI(t, "loadtest", "trace", "--jobs", traceJobs(t), "--shares", "0,100", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	snakeKeys(t, out)
	type ratios struct {
		Jobs            int      `json:"jobs"`
		JCTRatio        *float64 `json:"jct_ratio"`
		UtilRatio       *float64 `json:"util_ratio"`
		InputBoundShare *float64 `json:"input_bound_share"`
	}
	rep := decode[struct {
		Classes map[string]ratios `json:"classes"`
		Shares  []struct {
			All        ratios `json:"all"`
			InputBound ratios `json:"input_bound"`
		} `json:"shares"`
	}](t, out)
	if b, a := rep.Classes["input_bound"], rep.Classes["all"]; b.Jobs != 2 || a.Jobs != 8 || b.JCTRatio == nil || *b.JCTRatio < 1 {
		t.Errorf("classes %+v", rep.Classes)
	}
	if len(rep.Shares) != 2 {
		t.Fatalf("%d share rows, want 2", len(rep.Shares))
	}
	none, all := rep.Shares[0], rep.Shares[1]
	if none.InputBound.Jobs != 0 || none.InputBound.JCTRatio != nil || none.All.InputBoundShare == nil || *none.All.InputBoundShare != 0 {
		t.Errorf("0%% row %+v: want no input-bound tasks and no ratio for them", none)
	}
	if all.InputBound.Jobs != 8 || all.InputBound.JCTRatio == nil || all.All.JCTRatio == nil || *all.InputBound.JCTRatio != *all.All.JCTRatio {
		t.Errorf("100%% row %+v: want the input-bound class to be every task", all)
	}
}

func TestLoadtestTraceRefusesBadShares(t *testing.T) {
	for _, bad := range []string{"120", "ten", "10,-5"} {
		code, _, errs := runCLI(t, "loadtest", "trace", "--jobs", traceJobs(t), "--shares", bad)
		if code != 2 || !strings.Contains(errs, "want a percentage 0..100") {
			t.Errorf("--shares %s: exit %d, %q; want a usage error naming the range", bad, code, errs)
		}
	}
}

// snakeKeys fails t where the JSON document doc has a key that is not
// snake_case, as every command's --json output names its fields.
func snakeKeys(t *testing.T, doc string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("%v:\n%s", err, doc)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				for _, r := range k {
					if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
						t.Errorf("key %s.%s is not snake_case", path, k)
						break
					}
				}
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", v)
}
