package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// ErrSweepExists means a sweep with the id is already submitted.
var ErrSweepExists = errors.New("sweep already exists")

// ErrSweepNotFound means no sweep record has the id.
var ErrSweepNotFound = errors.New("sweep not found")

// Planner says how many replicas a job needs before it starts, so that a
// sweep's jobs are pre-warmed: their replicas start at submission, not
// after the trainers stalled long enough for a demand signal to ask.
// trainerRate is the samples per second the job's fastest reader takes (0:
// unknown). A planner that knows nothing of the job says 0.
type Planner interface {
	Replicas(ctx context.Context, spec wire.JobSpec, trainerRate float64) (int, error)
}

// SubmitSweep submits the sweep's jobs (wire.SweepSpec.Jobs: one per set
// of trials fed the same samples, a reader per trial), each pre-warmed
// with what planner says it needs for one trial's TrainerRate (the trials
// of a job share its output, so the job needs the rate of one, not their
// sum), and records the sweep. A job the planner cannot size starts
// cold; without a planner (nil) each starts with its min_replicas. A
// sweep that fails part-way removes the jobs it submitted.
//
// teamKey, when given, is each job's team key (WithTeamKey): the key its
// agents connect to NATS with.
func (b *Broker) SubmitSweep(ctx context.Context, spec wire.SweepSpec, planner Planner, teamKey ...func(job string) []byte) (wire.Sweep, error) {
	if err := spec.Validate(); err != nil {
		return wire.Sweep{}, err
	}
	// Every job is checked before the first is submitted, so that a bad
	// trial does not start (and then roll back) the others.
	var bad []error
	for _, js := range spec.Jobs() {
		if err := b.checkSpec(js.WithDefaults()); err != nil {
			bad = append(bad, err)
		}
	}
	if err := errors.Join(bad...); err != nil {
		return wire.Sweep{}, fmt.Errorf("sweep %s: %w", spec.ID, err)
	}
	kv, err := b.sweepsBucket(ctx)
	if err != nil {
		return wire.Sweep{}, err
	}
	if _, err := kv.Get(ctx, spec.ID); err == nil {
		return wire.Sweep{}, fmt.Errorf("sweep %s: %w (delete it first)", spec.ID, ErrSweepExists)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.Sweep{}, fmt.Errorf("looking up sweep %s: %w", spec.ID, err)
	}
	sw := wire.Sweep{Spec: spec, Submitted: time.Now().UTC()}
	var submitted []string
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		for _, id := range submitted {
			if err := b.Delete(rctx, id, true); err != nil {
				b.log.Warn("rolling back failed sweep", "sweep", spec.ID, "job", id, "err", err)
			}
		}
	}
	for _, js := range spec.Jobs() {
		n := js.MinReplicas // without a planner, or a record of earlier runs
		if planner != nil {
			if n, err = planner.Replicas(ctx, js, spec.TrainerRate); err != nil {
				b.log.Warn("planning a sweep job: starting it cold", "sweep", spec.ID, "job", js.ID, "err", err)
				n = 0
			}
		}
		js.InitialReplicas = max(n, 0)
		var opts []SubmitOption
		for _, k := range teamKey {
			opts = append(opts, WithTeamKey(k(js.ID)))
		}
		if _, err := b.Submit(ctx, js, opts...); err != nil {
			rollback()
			return wire.Sweep{}, fmt.Errorf("sweep %s: %w", spec.ID, err)
		}
		submitted = append(submitted, js.ID)
		sw.Jobs = append(sw.Jobs, wire.SweepJob{ID: js.ID, Trials: js.Readers, Prewarm: js.InitialReplicas})
	}
	record, err := json.Marshal(sw)
	if err != nil {
		rollback()
		return wire.Sweep{}, fmt.Errorf("sweep %s: encoding record: %w", spec.ID, err)
	}
	if _, err := kv.Create(ctx, spec.ID, record); err != nil {
		rollback()
		if errors.Is(err, jetstream.ErrKeyExists) {
			return wire.Sweep{}, fmt.Errorf("sweep %s: %w (delete it first)", spec.ID, ErrSweepExists)
		}
		return wire.Sweep{}, fmt.Errorf("sweep %s: storing record: %w", spec.ID, err)
	}
	b.log.Info("sweep submitted", "sweep", spec.ID, "trials", len(spec.ResolvedTrials()), "jobs", len(sw.Jobs))
	return sw, nil
}

// sweepsBucket opens the sweeps bucket, creating it where the other
// buckets predate it.
func (b *Broker) sweepsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	if _, err := b.buckets(ctx); err != nil {
		return nil, err
	}
	kv, err := b.js.KeyValue(ctx, wire.SweepsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		for _, cfg := range streams.Buckets(b.opts) {
			if cfg.Bucket == wire.SweepsBucket {
				kv, err = b.js.CreateKeyValue(ctx, cfg)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("opening key-value bucket %s: %w", wire.SweepsBucket, err)
	}
	return kv, nil
}

// SweepStatus is a sweep with each of its jobs' record and live status,
// and which trials finished.
type SweepStatus struct {
	Sweep wire.Sweep       `json:"sweep"`
	Jobs  []SweepJobStatus `json:"jobs"`
}

// SweepJobStatus is one job of a sweep. Job is zero where the job was
// deleted.
type SweepJobStatus struct {
	Job    wire.Job       `json:"job"`
	Status wire.JobStatus `json:"status"`
	// Done names the trials whose agent wrote wire.ReaderDoneKey for this
	// submission of the job.
	Done map[string]bool `json:"done"`
}

// Sweep reads a sweep's record and its jobs' status.
func (b *Broker) Sweep(ctx context.Context, id string) (SweepStatus, error) {
	kv, err := b.sweepsBucket(ctx)
	if err != nil {
		return SweepStatus{}, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return SweepStatus{}, fmt.Errorf("sweep %s: %w", id, ErrSweepNotFound)
	} else if err != nil {
		return SweepStatus{}, fmt.Errorf("reading sweep %s: %w", id, err)
	}
	var out SweepStatus
	if err := json.Unmarshal(e.Value(), &out.Sweep); err != nil {
		return SweepStatus{}, fmt.Errorf("decoding sweep %s: %w", id, err)
	}
	kvs, err := b.buckets(ctx)
	if err != nil {
		return SweepStatus{}, err
	}
	for _, sj := range out.Sweep.Jobs {
		js := SweepJobStatus{Done: map[string]bool{}}
		job, st, err := b.Status(ctx, sj.ID)
		switch {
		case errors.Is(err, ErrJobNotFound):
		case err != nil:
			return SweepStatus{}, fmt.Errorf("sweep %s: %w", id, err)
		default:
			js.Job, js.Status = job, st
			for _, trial := range sj.Trials {
				js.Done[trial] = readerDone(ctx, kvs.readers, job, trial)
			}
		}
		out.Jobs = append(out.Jobs, js)
	}
	return out, nil
}

// readerDone reports whether reader wrote its done key for this
// submission of job.
func readerDone(ctx context.Context, kv jetstream.KeyValue, job wire.Job, reader string) bool {
	e, err := kv.Get(ctx, wire.ReaderDoneKey(job.Spec.ID, reader))
	if err != nil {
		return false
	}
	d, _, err := wire.ReadReaderDone(job, e.Key(), e.Value())
	return err == nil && d.Submitted.Equal(job.Submitted)
}

// DeleteSweep removes sweep id's record, so that the id may be submitted
// again. Its jobs are not touched: delete each (Delete) first.
func (b *Broker) DeleteSweep(ctx context.Context, id string) error {
	kv, err := b.sweepsBucket(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Get(ctx, id); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("sweep %s: %w", id, ErrSweepNotFound)
	} else if err != nil {
		return fmt.Errorf("reading sweep %s: %w", id, err)
	}
	if err := kv.Purge(ctx, id); err != nil {
		return fmt.Errorf("sweep %s: deleting record: %w", id, err)
	}
	b.log.Info("sweep deleted", "sweep", id)
	return nil
}
