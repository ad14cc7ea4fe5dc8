package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/loadtest/sweep"
	"github.com/sluice-project/sluice/loadtest/trace"
)

// A small sweep, shared and independent under Sluice's policy and shared
// under the KEDA emulation, with real processes: every trial gets every
// sample exactly once; a shared sweep produces each chunk once (one task
// per shard per epoch of its one job) where independent trials each
// produce their own.
func TestLoadtestSweepSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Setenv(replicaEnv, "1") // the processes are this test binary, as sluice
	dir := t.TempDir()
	code, out, errs := runCLI(t, "loadtest", "sweep", "--trials", "3", "--seeds", "1", "--arrival", "1s",
		"--samples", "48", "--shards", "4", "--min-side", "16", "--max-side", "32", "--epochs", "2", "--batch-size", "8",
		"--step-time", "20ms", "--max-replicas", "3", "--job-max-replicas", "2", "--keda-polling-interval", "1s",
		"--runs", "sluice,sluice/independent,keda", "--run-timeout", "2m", "--out", dir, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	snakeKeys(t, out)
	rep := decode[sweep.Report](t, out)
	if len(rep.Runs) != 3 {
		t.Fatalf("%d runs, want 3", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		if len(r.Errors) > 0 || r.Duplicates != 0 || r.Missing != 0 || len(r.Trials) != 3 {
			t.Errorf("run %s: errors %v, %d duplicates, %d missing, %d trials; want every sample once to each of 3 trials", r.Name, r.Errors, r.Duplicates, r.Missing, len(r.Trials))
		}
		for _, tr := range r.Trials {
			if tr.Samples != 96 || tr.FirstBatchS <= 0 || tr.DoneS < tr.FirstBatchS {
				t.Errorf("run %s trial %s: %+v; want 96 samples, a first batch and an end", r.Name, tr.Name, tr)
			}
		}
	}
	shared, indep := rep.Runs[0], rep.Runs[1]
	if shared.Jobs != 1 || shared.ShardTasks != 8 || indep.Jobs != 3 || indep.ShardTasks != 24 {
		t.Errorf("shared: %d jobs, %d shard tasks; independent: %d, %d; want 1 job and 8 tasks (each chunk made once), 3 and 24",
			shared.Jobs, shared.ShardTasks, indep.Jobs, indep.ShardTasks)
	}
	if shared.ReplicaCPUS <= 0 || indep.ReplicaCPUS <= 0 {
		t.Errorf("replica cpu %v s shared, %v s independent: want both read from /proc", shared.ReplicaCPUS, indep.ReplicaCPUS)
	}
	// The independent run is what the trace simulator can predict: its job
	// list is written beside the report and reads back as one.
	if indep.SimJobs == nil || len(indep.SimJobs.Tasks) != 3 || indep.OtherCPUS <= 0 || shared.SimJobs != nil {
		t.Errorf("independent run: job list %+v, other cpu %v s; shared run's job list %v: want 3 simulated jobs for the independent run only",
			indep.SimJobs, indep.OtherCPUS, shared.SimJobs)
	} else if tr, err := trace.LoadJobs(filepath.Join(dir, "jobs-sluice-independent.yaml")); err != nil || len(tr.Tasks) != 3 || tr.Tasks[0].TrainerRate <= 0 {
		t.Errorf("written job list: %+v, %v; want 3 jobs with their measured trainer rate", tr, err)
	}
	for _, f := range []string{"report.json", "replicas.svg", "stall.svg"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(data) == 0 {
			t.Errorf("%s: %v", f, err)
		}
		if strings.HasSuffix(f, ".svg") && !strings.Contains(string(data), "sluice/independent") {
			t.Errorf("%s lacks the runs' legend", f)
		}
	}
	t.Logf("shared cpu %.2f s stall %.2f s; independent cpu %.2f s stall %.2f s; keda stall %.2f s",
		shared.ReplicaCPUS, shared.StallS, indep.ReplicaCPUS, indep.StallS, rep.Runs[2].StallS)
}
