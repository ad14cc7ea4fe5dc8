package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadtestClusterPrintsEveryRunAndWritesItsCharts(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCLI(t, "loadtest", "cluster", "--nodes", "4", "--sweeps", "5", "--window", "10m",
		"--trial-min", "1m", "--trial-max", "3m", "--static-cores", "1,3", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"sluice, shared", "sluice-fair, independent", "static 1 cores/trial", "static 3 cores/trial", "the best baseline"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"cost.svg", "reserved.svg"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(data, new(struct{})); err != nil {
			t.Errorf("%s: not well-formed: %v", f, err)
		}
	}
	for flag, want := range map[string]string{"--static-cores=1,x": `"1,x"`, "--burst-share=2": "burst share 2"} {
		code, _, errs = runCLI(t, "loadtest", "cluster", flag)
		if code != 2 || !strings.Contains(errs, want) {
			t.Errorf("%s: exit %d, %s; want 2 naming %s", flag, code, errs, want)
		}
	}
}

func TestLoadtestClusterJSON(t *testing.T) {
	code, out, errs := runCLI(t, "loadtest", "cluster", "--nodes", "4", "--sweeps", "5", "--window", "10m",
		"--trial-min", "1m", "--trial-max", "3m", "--static-cores", "1,3", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	snakeKeys(t, out)
	rep := decode[clusterReport](t, out)
	names := map[string]bool{}
	for _, r := range rep.Runs {
		names[r.Run] = true
	}
	if rep.Nodes != 4 || rep.Sweeps != 5 || rep.WindowS != 600 || !names["sluice, shared"] || !names["static 3 cores/trial"] || len(rep.Verdicts) == 0 {
		t.Errorf("report %+v: want 4 nodes, 5 sweeps over 600 s, the sluice and static runs, and verdicts", rep)
	}
}
