package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/planner"
	"github.com/sluice-project/sluice/wire"
)

const sweepFile = `id: sw
dataset: s3://data/ds/
pipeline: imagenet-train
batch_size: 4
epochs: 1
seed: 3
trainer_rate: 500
output_buffer_bytes: 64MiB
trials:
  - {name: a}
  - {name: b}
  - {name: c, seed: 4}
`

func TestSweepCommandsEndToEnd(t *testing.T) {
	e := newJobEnv(t)
	spec := e.file(t, "sweep.yaml", sweepFile)
	code, out, errs := runCLI(t, append([]string{"sweep", "submit", spec, "--per-replica-rate", "200", "--json"}, e.conn...)...)
	wantOutput(t, "submit", code, 0, out+errs)
	snakeKeys(t, out)
	sw := decode[wire.Sweep](t, out)
	if len(sw.Jobs) != 2 || sw.Jobs[0].Prewarm != 3 || strings.Join(sw.Jobs[0].Trials, ",") != "a,b" {
		t.Errorf("sweep %+v: want two jobs, a and b sharing the first, pre-warmed with ceil(500/200) = 3", sw.Jobs)
	}
	job, err := e.b.Job(t.Context(), "sw-1")
	if err != nil || job.Spec.Seed != 4 || job.Spec.InitialReplicas != 3 {
		t.Errorf("job sw-1 %+v, %v: want seed 4, 3 initial replicas", job.Spec, err)
	}
	// Each job's agents connect with the team key written for it.
	keyText, err := os.ReadFile(wire.TeamKeyPath(os.Getenv(wire.TeamKeyDirEnv), "sw-1"))
	if err != nil {
		t.Fatalf("job sw-1's team key: %v", err)
	}
	if key, err := wire.ParseTeamKey(keyText); err != nil || !wire.AgentPasswordMatches(wire.AgentNATSPassword(key), job.AgentAuth) {
		t.Errorf("job sw-1's record does not let in agents with its team key (%v)", err)
	}
	code, out, _ = runCLI(t, "sweep", "status", "sw", "--nats", e.conn[1])
	wantOutput(t, "status", code, 0, out, "sweep sw: 2 jobs", "sw-0", "queued", "a", "waiting", "sw-1", "c")
	code, out, _ = runCLI(t, "sweep", "status", "sw", "--nats", e.conn[1], "--json")
	wantOutput(t, "status --json", code, 0, out, `"sw-0"`, `"sw-1"`)
	snakeKeys(t, out)

	code, out, errs = runCLI(t, append([]string{"sweep", "submit", spec}, e.conn...)...)
	wantOutput(t, "submit again", code, 1, out+errs, "already exists")

	// Without --per-replica-rate, the jobs are pre-warmed from the rate
	// controllers learned for the pipeline on earlier runs.
	store, err := planner.Open(t.Context(), e.js)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Record(t.Context(), "imagenet-train", "s3://data/other/", planner.Observation{Job: "old", PerReplica: 125, ReplicaSeconds: 60, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	learned := e.file(t, "learned.yaml", strings.Replace(sweepFile, "id: sw", "id: sw2", 1))
	code, out, errs = runCLI(t, append([]string{"sweep", "submit", learned, "--json"}, e.conn...)...)
	wantOutput(t, "submit with a learned rate", code, 0, out+errs)
	if sw := decode[wire.Sweep](t, out); len(sw.Jobs) != 2 || sw.Jobs[0].Prewarm != 4 || sw.Jobs[1].Prewarm != 4 {
		t.Errorf("sweep %+v: want both jobs pre-warmed from the learned 125/s: ceil(500/125) = 4", sw.Jobs)
	}
	bad := e.file(t, "bad.yaml", strings.Replace(sweepFile, "{name: b}", "{name: a}", 1))
	code, out, errs = runCLI(t, append([]string{"sweep", "submit", bad}, e.conn...)...)
	wantOutput(t, "submit a bad file", code, 1, out+errs, `"a": named twice`)
}
