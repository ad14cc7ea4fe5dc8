package planner

import (
	"math"
	"time"
)

// HalfLife is the replica-seconds of new evidence that weigh as much as
// everything learned before.
const HalfLife = 600.0

// Rate is what is kept about one pipeline (or pipeline and dataset).
type Rate struct {
	// PerReplica is one replica's throughput, samples/s.
	PerReplica float64 `json:"per_replica_per_s"`
	// ReplicaSeconds is the evidence behind it, all observations summed.
	ReplicaSeconds float64 `json:"replica_seconds"`
	// Observations counts the records folded in; Job names the last job.
	Observations int64     `json:"observations"`
	Job          string    `json:"job,omitempty"`
	Updated      time.Time `json:"updated"`
}

// Observation is one measurement of a running job.
type Observation struct {
	Job string
	// PerReplica is the samples/s one replica delivered, over
	// ReplicaSeconds of serving replicas.
	PerReplica, ReplicaSeconds float64
	At                         time.Time
}

// Learn folds o into r: the first observation is taken as it is, later
// ones with weight 1 - 2^(-o.ReplicaSeconds/HalfLife). An observation
// without a positive rate and evidence leaves r as it is.
func Learn(r Rate, o Observation) Rate {
	if !(o.PerReplica > 0) || !(o.ReplicaSeconds > 0) || math.IsInf(o.PerReplica, 0) || math.IsInf(o.ReplicaSeconds, 0) {
		return r
	}
	if r.PerReplica > 0 {
		w := 1 - math.Exp2(-o.ReplicaSeconds/HalfLife)
		r.PerReplica = (1-w)*r.PerReplica + w*o.PerReplica
	} else {
		r.PerReplica = o.PerReplica
	}
	r.ReplicaSeconds += o.ReplicaSeconds
	r.Observations++
	r.Job, r.Updated = o.Job, o.At
	return r
}

// ReplicasFor is how many replicas feed a trainer eating trainerRate
// samples/s at perReplica samples/s each: ceil(trainerRate / perReplica),
// at least 1; 0 when either is not positive.
func ReplicasFor(trainerRate, perReplica float64) int {
	if !(trainerRate > 0) || !(perReplica > 0) {
		return 0
	}
	n := math.Ceil(trainerRate/perReplica - 1e-9)
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return max(int(n), 1)
}
