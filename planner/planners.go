package planner

import (
	"context"

	"github.com/sluice-project/sluice/wire"
)

// MinReplicas is the planner without a record of earlier runs: a job
// starts with its min_replicas (0: the controller's default).
type MinReplicas struct{}

// Replicas says how many replicas spec's job starts with (a
// broker.Planner).
func (MinReplicas) Replicas(_ context.Context, spec wire.JobSpec, _ float64) (int, error) {
	return spec.MinReplicas, nil
}

// ByRate is the FastFlow-style estimate from a known per-replica rate:
// ceil(trainer rate / per-replica rate), or MinReplicas's answer when
// either is unknown. PerReplica gives a job's samples per second per
// replica (0: unknown): one measured on an earlier run (Store.PerReplica)
// or given.
type ByRate struct {
	PerReplica func(ctx context.Context, spec wire.JobSpec) (float64, error)
}

// Replicas says how many replicas spec's job needs for trainerRate (a
// broker.Planner).
func (p ByRate) Replicas(ctx context.Context, spec wire.JobSpec, trainerRate float64) (int, error) {
	r, err := p.PerReplica(ctx, spec)
	if err != nil {
		return 0, err
	}
	return max(ReplicasFor(trainerRate, r), spec.MinReplicas), nil
}
