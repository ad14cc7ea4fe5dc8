package trace

import (
	"bytes"
	"compress/gzip"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// small is a cluster of 2 nodes' worth of cores with four GPU tasks: two
// whose requests cannot feed their trainers, two that can, and a CPU-only
// task.
func small() Trace {
	return Trace{
		Cluster: Cluster{Cores: 64, GPUs: 8, Nodes: 2, Other: []Task{{Name: "cpu", Start: 0, Duration: 500, Cores: 8}}},
		Tasks: []Task{
			// Needs 1000/100 = 10 cores, has 4 - 1.
			{Name: "bound-a", Start: 0, Duration: 600, GPUs: 1, Cores: 4, TrainerRate: 1000, CPUPerSample: 0.01},
			{Name: "bound-b", Start: 100, Duration: 300, GPUs: 2, Cores: 6, TrainerRate: 2000, CPUPerSample: 0.01},
			// Needs 2 cores, has 11.
			{Name: "fed", Start: 50, Duration: 400, GPUs: 1, Cores: 12, TrainerRate: 200, CPUPerSample: 0.01},
			{Name: "late", Start: 900, Duration: 100, GPUs: 1, Cores: 12, TrainerRate: 500, CPUPerSample: 0.01},
		},
	}
}

func TestStaticReproducesTheTrace(t *testing.T) {
	m := DefaultModel()
	tr := small()
	r, err := Simulate(context.Background(), tr, Prepare(tr, m), m, Static)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range r.Jobs {
		var task Task
		for _, x := range tr.Tasks {
			if x.Name == j.Name {
				task = x
			}
		}
		if math.Abs(j.JCT-task.Duration) > 1e-6 {
			t.Errorf("%s: static JCT %.3f, want the trace's %.0f", j.Name, j.JCT, task.Duration)
		}
	}
}

func TestSluiceFeedsInputBoundTasks(t *testing.T) {
	m := DefaultModel()
	tr := small()
	c, err := Compare(context.Background(), tr, m)
	if err != nil {
		t.Fatal(err)
	}
	static, sluice := c.Results[0], c.Results[1]
	for i, j := range sluice.Jobs {
		s := static.Jobs[i]
		switch {
		case strings.HasPrefix(j.Name, "bound"):
			// 3 (or 5) of 10 (or 20) cores: static takes 3.3x (4x) the
			// trainer's time; the pool has plenty, so Sluice takes the
			// trainer's time plus a few seconds of scale-up.
			ideal := s.JCT - s.Stall
			if j.JCT > ideal+30 || j.JCT < ideal {
				t.Errorf("%s: JCT %.1fs under Sluice, want within 30 s of its trainer's %.1fs (static %.1fs)", j.Name, j.JCT, ideal, s.JCT)
			}
		default:
			if j.JCT > s.JCT+10 {
				t.Errorf("%s: JCT %.1fs under Sluice, static %.1fs: a fed task may lose only its replicas' start", j.Name, j.JCT, s.JCT)
			}
		}
	}
	if c.JCTRatio() < 1.5 || c.UtilRatio() < 1.5 || c.InputBound != 0.5 {
		t.Errorf("JCT ratio %.2f, util ratio %.2f, input-bound %.2f; want both ratios above 1.5 with half the tasks bound", c.JCTRatio(), c.UtilRatio(), c.InputBound)
	}
}

// TestShortPoolMarginalBeatsFair: with no lendable cores the pool is the
// tasks' own data loader cores; the marginal allocator moves them to the
// tasks that gain, so the trainers make at least the fair split's
// progress.
func TestShortPoolMarginalBeatsFair(t *testing.T) {
	m := DefaultModel()
	m.Lendable = 0
	tr := small()
	c, err := Compare(context.Background(), tr, m)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sluice.StallS > c.Fair.StallS+1 {
		t.Errorf("stall %.0fs with the marginal allocator, %.0fs with the fair split", c.Sluice.StallS, c.Fair.StallS)
	}
	if c.Sluice.MeanJCT > c.Static.MeanJCT {
		t.Errorf("mean JCT %.0fs under Sluice above static's %.0fs with the same cores", c.Sluice.MeanJCT, c.Static.MeanJCT)
	}
}

func TestSimulationIsDeterministic(t *testing.T) {
	m := DefaultModel()
	tr := small()
	tr.Tasks[0].TrainerRate, tr.Tasks[0].CPUPerSample = 0, 0 // drawn
	a, err := Compare(context.Background(), tr, m)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Compare(context.Background(), tr, m)
	if err != nil {
		t.Fatal(err)
	}
	if a.Sluice != b.Sluice || a.Static != b.Static {
		t.Errorf("two runs differ: %+v / %+v", a.Sluice, b.Sluice)
	}
}

func TestParseJobs(t *testing.T) {
	tr, err := ParseJobs(strings.NewReader(`
cluster: {cores: 2}
jobs:
  - {name: t1, start_s: 0, gpus: 1, cores: 1, samples: 6000, trainer_rate: 500, cpu_s_per_sample: 0.003}
  - {name: t2, start_s: 1.5, gpus: 1, cores: 1, samples: 6000}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Tasks) != 2 || tr.Tasks[1].Start != 1.5 || tr.Cluster.Cores != 2 {
		t.Fatalf("parsed %+v", tr)
	}
	m := DefaultModel()
	m.HostCoresPerGPU = 0 // one machine: the trainer's loop is not on the data cores
	c, err := Compare(context.Background(), tr, m)
	if err != nil {
		t.Fatal(err)
	}
	if c.Static.Jobs != 2 || c.Sluice.Jobs != 2 {
		t.Fatalf("summaries %+v %+v", c.Static, c.Sluice)
	}
	for _, bad := range []string{`jobs: []`, `cluster: {cores: 2}
jobs: [{name: x, gpus: 1, cores: 1}]`, `cluster: {cores: 2}
jobs: [{name: x, gpus: 1, cores: 1, samples: 5, colour: red}]`} {
		if _, err := ParseJobs(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseJobs(%q) accepted it", bad)
		}
	}
}

func loadTrace(tb testing.TB) Trace {
	tb.Helper()
	tr, err := LoadAlibaba(Alibaba())
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}

// TestAlibabaTraceHead runs the first 500 GPU tasks of the trace.
func TestAlibabaTraceHead(t *testing.T) {
	tr := loadTrace(t)
	if len(tr.Tasks) != 6203 || tr.Cluster.Nodes != 1213 || len(tr.Cluster.Other) == 0 {
		t.Fatalf("trace: %d GPU tasks, %d nodes; want 6203 scheduled GPU tasks on 1213 nodes", len(tr.Tasks), tr.Cluster.Nodes)
	}
	tr.Tasks = Prepare(tr, DefaultModel())[:500]
	c, err := Compare(context.Background(), tr, DefaultModel())
	if err != nil {
		t.Fatal(err)
	}
	if c.JCTRatio() < 1 || c.UtilRatio() < 1 {
		t.Errorf("JCT ratio %.2f, util ratio %.2f: Sluice with the whole pool did worse than static", c.JCTRatio(), c.UtilRatio())
	}
}

// BenchmarkAlibabaTrace simulates the whole trace under every policy
// (the bound: under 60 s).
func BenchmarkAlibabaTrace(b *testing.B) {
	tr := loadTrace(b)
	for b.Loop() {
		start := time.Now()
		c, err := Compare(context.Background(), tr, DefaultModel())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/trace")
		b.ReportMetric(c.JCTRatio(), "jct-ratio")
		b.ReportMetric(c.UtilRatio(), "util-ratio")
	}
}

// TestReplicasShareCores: with more replicas allowed than cores
// (cluster.max_replicas) the replicas split the cores, so two jobs
// wanting 10 cores each train 100 samples/s together on one core.
func TestReplicasShareCores(t *testing.T) {
	tr, err := ParseJobs(strings.NewReader(`
cluster: {cores: 1, max_replicas: 4}
jobs:
  - {name: a, start_s: 0, gpus: 1, cores: 0.5, samples: 1000, trainer_rate: 1000, cpu_s_per_sample: 0.01}
  - {name: b, start_s: 0, gpus: 1, cores: 0.5, samples: 1000, trainer_rate: 1000, cpu_s_per_sample: 0.01}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := DefaultModel()
	m.HostCoresPerGPU = 0
	r, err := Simulate(context.Background(), tr, Prepare(tr, m), m, Sluice)
	if err != nil {
		t.Fatal(err)
	}
	last := 0.0
	for _, j := range r.Jobs {
		last = max(last, j.JCT)
	}
	// 2,000 samples at 100/s in all: 20 s, plus the replicas' start.
	if last < 20 || last > 30 {
		t.Errorf("the last job finished at %.1fs, want 20-30 s: the replicas share one core", last)
	}
}

// TestBaselinesRunOnTheSameTasks: Knative's KPA and KEDA size the same
// pool's replicas on the same tasks; every task finishes, each policy
// reserves core-seconds, and the run is deterministic. Both scale on
// shard tasks left, blind to the trainers' stall, so the KPA (which sizes
// for 0.7 requests in flight per replica) reserves the pool for a task
// that Sluice feeds with fewer.
func TestBaselinesRunOnTheSameTasks(t *testing.T) {
	m := DefaultModel()
	tr := small()
	for i := range tr.Tasks {
		tr.Tasks[i].ShardSamples = 1000
	}
	tasks := Prepare(tr, m)
	got := map[Policy]Summary{}
	for _, p := range []Policy{Sluice, KPA, KEDA} {
		r, err := Simulate(context.Background(), tr, tasks, m, p)
		if err != nil {
			t.Fatal(err)
		}
		s := r.Summarize()
		if s.Jobs != len(tasks) || !(s.CoreHours > 0) {
			t.Errorf("%s: %d of %d tasks done, %v core-hours reserved", p, s.Jobs, len(tasks), s.CoreHours)
		}
		again, _ := Simulate(context.Background(), tr, tasks, m, p)
		if again.Summarize() != s {
			t.Errorf("%s: two runs differ: %+v / %+v", p, s, again.Summarize())
		}
		got[p] = s
		t.Logf("%-6s mean JCT %6.0f s, stall %7.0f s, reserved %6.2f core-h, GPU util %.1f%%", p, s.MeanJCT, s.StallS, s.CoreHours, 100*s.GPUUtil)
	}
	if !(got[KPA].CoreHours > got[Sluice].CoreHours) {
		t.Errorf("the KPA reserved %.2f core-h, Sluice %.2f: want the KPA more", got[KPA].CoreHours, got[Sluice].CoreHours)
	}
	if _, err := Simulate(context.Background(), tr, tasks, m, "hpa"); err == nil || !strings.Contains(err.Error(), "kpa or keda") {
		t.Errorf("an unknown policy: %v", err)
	}
}

// TestLoadAlibabaFromADirectory reads a trace of the same format from a
// directory (--data), one file plain and one gzipped.
func TestLoadAlibabaFromADirectory(t *testing.T) {
	dir := t.TempDir()
	nodes := "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,786432,8,V100\n"
	pods := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"p1,12000,0,1,1000,,LS,Running,0,600,10\np2,4000,0,0,0,,BE,Running,5,100,5\np3,8000,0,1,1000,,LS,Pending,7,,\n"
	if err := os.WriteFile(filepath.Join(dir, NodesFile), []byte(nodes), 0o600); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(pods))
	zw.Close()
	if err := os.WriteFile(filepath.Join(dir, PodsFile+".gz"), gz.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := LoadAlibaba(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Cluster.Nodes != 1 || tr.Cluster.GPUs != 8 || len(tr.Tasks) != 1 || len(tr.Cluster.Other) != 1 || tr.Tasks[0].Duration != 590 {
		t.Errorf("trace %+v: want 1 node of 8 GPUs, 1 GPU task of 590 s, 1 CPU-only task (the pending one left out)", tr)
	}
	if _, err := LoadAlibaba(os.DirFS(t.TempDir())); err == nil {
		t.Error("an empty directory: no error")
	}
}
