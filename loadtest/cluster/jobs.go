package cluster

import (
	"fmt"

	"github.com/sluice-project/sluice/loadtest/trace"
)

// Sharing is how a sweep's trials are submitted.
type Sharing string

const (
	// Shared: a sweep is one job, each trial a reader of it, so each
	// sample is preprocessed once for all of them (broker.SubmitSweep).
	// The job is submitted, and its trials start, at the sweep's first
	// arrival: the later trials' few seconds are not modelled.
	Shared Sharing = "shared"
	// Independent: each trial is its own job, submitted at its arrival,
	// as a platform without sharing runs a sweep.
	Independent Sharing = "independent"
)

// Trace is the scenario's sweeps as the trace simulator's job list for
// run: under static allocation each trial asks for run.StaticCores data
// loader cores beside its trainer's (none under the pooled policies,
// whose replicas come from the cluster's idle cores); run.MaxReplicas
// caps each job's replicas.
func (s Scenario) Trace(sweeps []Sweep, run Run) trace.Trace {
	sharing, staticCores := run.Sharing, run.StaticCores
	tr := trace.Trace{Cluster: trace.Cluster{
		Cores: float64(s.Nodes) * s.CoresPerNode,
		GPUs:  float64(s.Nodes * s.GPUsPerNode),
		Nodes: s.Nodes,
	}}
	gpus := float64(s.GPUsPerTrial)
	host := s.HostCoresPerGPU * gpus
	for _, sw := range sweeps {
		samples := sw.TrainS * sw.TrainerRate
		task := trace.Task{GPUs: gpus, TrainerRate: sw.TrainerRate, CPUPerSample: sw.CPUPerSample, Samples: samples,
			MaxReplicas: run.MaxReplicas}
		if sharing == Shared {
			n := float64(len(sw.Arrivals))
			task.Name, task.Readers = sw.Name, len(sw.Arrivals)
			task.Arrival, task.Start = sw.Arrivals[0], sw.Arrivals[0]
			task.HostCores = n * host
			task.Cores = n * (host + staticCores)
			tr.Tasks = append(tr.Tasks, task)
			continue
		}
		for i, at := range sw.Arrivals {
			t := task
			t.Name, t.Readers = fmt.Sprintf("%s-t%02d", sw.Name, i), 1
			t.Arrival, t.Start = at, at
			t.HostCores, t.Cores = host, host+staticCores
			tr.Tasks = append(tr.Tasks, t)
		}
	}
	return tr
}
