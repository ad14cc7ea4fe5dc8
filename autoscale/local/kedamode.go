package local

import (
	"log/slog"
	"time"
)

// Lag reports a job's queue lag now: what KEDA's NATS JetStream scaler
// reads from the consumer (messages not yet acked).
type Lag interface {
	Lag(job string) float64
}

// BacklogLag is a job's tasks pending and in flight: the messages of its
// dispatch consumer that are not acked yet.
type BacklogLag struct {
	// Backlog gives a job's tasks; ok false for a job it does not know.
	Backlog func(job string) (pending, inflight int, ok bool)
}

// Lag implements Lag.
func (b BacklogLag) Lag(job string) float64 {
	p, f, ok := b.Backlog(job)
	if !ok {
		return 0
	}
	return float64(p + f)
}

// KEDAMode lets a KEDA ScaledObject on queue lag (DecideKEDA) size each
// job's replicas instead of Sluice's policy: on one machine, the baseline
// that platform teams run for queue consumers, to compare with "Sluice
// decides" on the same work. As KPAMode, it takes each of the runner's
// Scale calls as its own tick and ignores the count asked for. A job's
// min/max replicas are its minReplicaCount and maxReplicaCount.
type KEDAMode struct {
	*emulated
}

// kedaJob is one job's ScaledObject and what KEDA and the HPA remember.
type kedaJob struct {
	cfg KEDAConfig
	st  KEDAState
}

func (j *kedaJob) bound(lo, hi int) { j.cfg.MinReplicaCount, j.cfg.MaxReplicaCount = lo, hi }

func (j *kedaJob) decide(lag float64, _ int, now time.Time) (int, string) {
	var dec KEDADecision
	dec, j.st = DecideKEDA(j.cfg, j.st, lag, now)
	return dec.Replicas, dec.Reason
}

// NewKEDAMode wraps act; logger may be nil. A cfg without a Phase is
// aligned to now.
func NewKEDAMode(act replicaRunner, cfg KEDAConfig, lag Lag, logger *slog.Logger) (*KEDAMode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Phase.IsZero() {
		cfg.Phase = time.Now()
	}
	newJob := func() emulatedJob { return &kedaJob{cfg: cfg} }
	return &KEDAMode{newEmulated(act, "keda", lag.Lag, cfg.MaxReplicaCount, newJob, logger)}, nil
}
