package trace

import (
	"compress/gzip"
	"embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"gopkg.in/yaml.v3"
)

// Task is one job of the simulation: a GPU task of the trace, or one of a
// job list.
type Task struct {
	Name string `json:"name" yaml:"name"`
	// Start is when the task got its GPUs (s); Duration how long it held
	// them in the trace, which ran with the static allocation (0 in a job
	// list, which gives Samples instead).
	Start    float64 `json:"start_s" yaml:"start_s"`
	Duration float64 `json:"duration_s,omitempty" yaml:"duration_s,omitempty"`
	// Arrival is when the task was submitted (the trace's creation
	// time; Start where not given): with Model.QueueGPUs tasks start
	// when GPUs are free, not at Start.
	Arrival float64 `json:"arrival_s,omitempty" yaml:"arrival_s,omitempty"`
	// GPUs is the GPUs held (a share of one for GPU-sharing tasks); Cores
	// the CPUs the task asked for on its node.
	GPUs  float64 `json:"gpus" yaml:"gpus"`
	Cores float64 `json:"cores" yaml:"cores"`
	// Samples is the work to train through (a job list's); for a trace
	// task it is Duration times the rate static allocation gave it.
	Samples float64 `json:"samples,omitempty" yaml:"samples,omitempty"`
	// TrainerRate is the samples/s the trainer eats at full speed and
	// CPUPerSample the CPU-seconds preprocessing one sample costs: drawn
	// from the Model for trace tasks, given (or drawn where 0) in a job
	// list.
	TrainerRate  float64 `json:"trainer_rate,omitempty" yaml:"trainer_rate,omitempty"`
	CPUPerSample float64 `json:"cpu_s_per_sample,omitempty" yaml:"cpu_s_per_sample,omitempty"`
	// HostCores are the cores the trainer keeps for itself (its training
	// loop) under either policy; 0: the Model's per GPU.
	HostCores float64 `json:"host_cores,omitempty" yaml:"host_cores,omitempty"`
	// MaxReplicas caps the task's replicas under Sluice (0: no cap but
	// the pool), as a job spec's max_replicas does.
	MaxReplicas int `json:"max_replicas,omitempty" yaml:"max_replicas,omitempty"`
	// Readers are the trainers reading the task's samples, as a sweep's
	// trials share one job: each waits alike, so stall and GPUs count once
	// per reader (0: 1).
	Readers int `json:"readers,omitempty" yaml:"readers,omitempty"`
	// BufferSamples bounds how far Sluice's replicas may preprocess ahead
	// of the trainer (the job's output buffer, in samples); ShardSamples
	// are one shard task's samples, so that the autoscaler sees the tasks
	// left. 0: the Model's.
	BufferSamples float64 `json:"buffer_samples,omitempty" yaml:"buffer_samples,omitempty"`
	ShardSamples  float64 `json:"shard_samples,omitempty" yaml:"shard_samples,omitempty"`
	// Censored tasks were still running when the trace ended: they hold
	// GPUs and CPUs but their completion time is unknown, so they are left
	// out of the averages.
	Censored bool `json:"censored,omitempty" yaml:"censored,omitempty"`
}

// Cluster is what the tasks run on.
type Cluster struct {
	// Cores are all the CPUs of the GPU nodes; GPUs all the GPUs.
	Cores float64 `json:"cores" yaml:"cores"`
	GPUs  float64 `json:"gpus" yaml:"gpus"`
	Nodes int     `json:"nodes" yaml:"nodes"`
	// MaxReplicas, in a job list, caps the replicas of all jobs (a
	// controller's --max-replicas) instead of one replica per core: more
	// replicas than cores then share them, as processes on one machine.
	MaxReplicas int `json:"max_replicas,omitempty" yaml:"max_replicas,omitempty"`
	// Other are tasks without GPUs: they hold CPUs only.
	Other []Task `json:"-" yaml:"-"`
}

// Trace is a cluster and its tasks.
type Trace struct {
	Cluster Cluster `json:"cluster" yaml:"cluster"`
	Tasks   []Task  `json:"jobs" yaml:"jobs"`
}

// Alibaba's openb files, in the directory LoadAlibaba reads (each as
// itself or gzipped, NAME.gz).
const (
	PodsFile  = "openb_pod_list_default.csv"
	NodesFile = "openb_node_list_gpu_node.csv"
)

// The trace ships inside Sluice, gzipped, with its README (its source, to
// cite where results built on it are reported): `sluice loadtest trace`
// runs from any checkout or binary.
//
//go:embed alibaba-openb-2023
var alibabaFiles embed.FS

// AlibabaSource names the shipped trace, as LoadAlibaba's callers print it.
const AlibabaSource = "Alibaba PAI cluster-trace-gpu-v2023 (openb), shipped in loadtest/trace/alibaba-openb-2023"

// Alibaba is the shipped trace's files, for LoadAlibaba.
func Alibaba() fs.FS {
	sub, err := fs.Sub(alibabaFiles, "alibaba-openb-2023")
	if err != nil {
		panic(err) // cannot happen: the directory is embedded
	}
	return sub
}

// LoadAlibaba reads the Alibaba PAI GPU cluster trace (cluster-trace-gpu-
// v2023, openb) from fsys (Alibaba(), or os.DirFS of a directory): every
// node, every GPU task that was scheduled (pending ones never ran), and
// the CPU-only tasks as Cluster.Other.
func LoadAlibaba(fsys fs.FS) (Trace, error) {
	var tr Trace
	nodes, err := readCSV(fsys, NodesFile, "cpu_milli", "gpu")
	if err != nil {
		return tr, err
	}
	for i, row := range nodes.rows {
		cpu, err1 := nodes.num(row, "cpu_milli")
		gpu, err2 := nodes.num(row, "gpu")
		if err := errors.Join(err1, err2); err != nil {
			return tr, fmt.Errorf("%s line %d: %w", NodesFile, i+2, err)
		}
		tr.Cluster.Cores += cpu / 1000
		tr.Cluster.GPUs += gpu
		tr.Cluster.Nodes++
	}
	pods, err := readCSV(fsys, PodsFile, "name", "cpu_milli", "num_gpu", "gpu_milli", "creation_time", "scheduled_time", "deletion_time")
	if err != nil {
		return tr, err
	}
	end := 0.0
	type pod struct {
		t        Task
		deletion float64
	}
	var all []pod
	for i, row := range pods.rows {
		if row[pods.col["scheduled_time"]] == "" {
			continue // never scheduled
		}
		var p pod
		cpu, e1 := pods.num(row, "cpu_milli")
		ngpu, e2 := pods.num(row, "num_gpu")
		milli, e3 := pods.num(row, "gpu_milli")
		sched, e4 := pods.num(row, "scheduled_time")
		del, e5 := pods.num(row, "deletion_time")
		created, e6 := pods.num(row, "creation_time")
		if err := errors.Join(e1, e2, e3, e4, e5, e6); err != nil {
			return tr, fmt.Errorf("%s line %d: %w", PodsFile, i+2, err)
		}
		p.t = Task{Name: row[pods.col["name"]], Start: sched, Arrival: min(created, sched), Duration: del - sched, Cores: cpu / 1000}
		if ngpu > 0 {
			p.t.GPUs = ngpu * milli / 1000
		}
		p.deletion = del
		end = max(end, del)
		all = append(all, p)
	}
	for _, p := range all {
		if p.t.Duration <= 0 {
			continue
		}
		p.t.Censored = p.deletion >= end
		if p.t.GPUs > 0 {
			tr.Tasks = append(tr.Tasks, p.t)
		} else {
			tr.Cluster.Other = append(tr.Cluster.Other, p.t)
		}
	}
	return tr, nil
}

// LoadJobs reads a job list (YAML or JSON): a cluster (cores, gpus) and
// jobs with start_s, gpus, cores, samples and, optionally, trainer_rate
// and cpu_s_per_sample (drawn from the model where 0).
func LoadJobs(path string) (Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return Trace{}, fmt.Errorf("reading job list: %w", err)
	}
	defer f.Close()
	return ParseJobs(f)
}

// ParseJobs is LoadJobs on a reader.
func ParseJobs(r io.Reader) (Trace, error) {
	var tr Trace
	dec := yaml.NewDecoder(r) // YAML is a superset of JSON
	dec.KnownFields(true)
	if err := dec.Decode(&tr); err != nil {
		return Trace{}, fmt.Errorf("parsing job list: %w", err)
	}
	var errs []error
	if !(tr.Cluster.Cores > 0) {
		errs = append(errs, fmt.Errorf("cluster.cores %v: want > 0", tr.Cluster.Cores))
	}
	if tr.Cluster.MaxReplicas < 0 || tr.Cluster.MaxReplicas > 100000 {
		errs = append(errs, fmt.Errorf("cluster.max_replicas %d: want 0 (one per core)..100000", tr.Cluster.MaxReplicas))
	}
	seen := make(map[string]int, len(tr.Tasks))
	for i, t := range tr.Tasks {
		if t.Name == "" {
			tr.Tasks[i].Name = fmt.Sprintf("job-%d", i)
		}
		// Results are kept by name (a job's class, its row per policy).
		if j, ok := seen[tr.Tasks[i].Name]; ok {
			errs = append(errs, fmt.Errorf("jobs[%d].name %q: jobs[%d] has it too, want unique names", i, tr.Tasks[i].Name, j))
		}
		seen[tr.Tasks[i].Name] = i
		if t.Arrival == 0 {
			tr.Tasks[i].Arrival = t.Start
		}
		switch {
		case !(t.Samples > 0):
			errs = append(errs, fmt.Errorf("jobs[%d].samples %v: want > 0", i, t.Samples))
		case !(t.GPUs > 0):
			errs = append(errs, fmt.Errorf("jobs[%d].gpus %v: want > 0", i, t.GPUs))
		case !(t.Cores > 0):
			errs = append(errs, fmt.Errorf("jobs[%d].cores %v: want > 0, the cores its static data loader would have", i, t.Cores))
		case t.TrainerRate < 0 || t.CPUPerSample < 0 || t.Start < 0 || t.MaxReplicas < 0 || t.Readers < 0 || t.BufferSamples < 0 || t.ShardSamples < 0:
			errs = append(errs, fmt.Errorf("jobs[%d]: negative start_s, trainer_rate, cpu_s_per_sample, max_replicas, readers, buffer_samples or shard_samples", i))
		}
	}
	if len(tr.Tasks) == 0 {
		errs = append(errs, errors.New("jobs: want at least one"))
	}
	if err := errors.Join(errs...); err != nil {
		return Trace{}, fmt.Errorf("job list: %w", err)
	}
	return tr, nil
}

type table struct {
	col  map[string]int
	rows [][]string
}

func (t table) num(row []string, name string) (float64, error) {
	v, err := strconv.ParseFloat(row[t.col[name]], 64)
	if err != nil {
		return 0, fmt.Errorf("column %s: %w", name, err)
	}
	return v, nil
}

// readCSV reads name, or name.gz, from fsys.
func readCSV(fsys fs.FS, name string, cols ...string) (table, error) {
	path := name
	f, err := fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		path = name + ".gz"
		f, err = fsys.Open(path)
	}
	if err != nil {
		return table{}, fmt.Errorf("reading trace: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if path != name {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return table{}, fmt.Errorf("reading %s: %w", path, err)
		}
		r = zr
	}
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return table{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(rows) == 0 {
		return table{}, fmt.Errorf("reading %s: empty", path)
	}
	t := table{col: map[string]int{}, rows: rows[1:]}
	for i, name := range rows[0] {
		t.col[name] = i
	}
	for _, need := range cols {
		if _, ok := t.col[need]; !ok {
			return table{}, fmt.Errorf("reading %s: no column %s", path, need)
		}
	}
	return t, nil
}
