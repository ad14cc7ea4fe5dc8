package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// List returns every job's record, oldest submission first.
func (b *Broker) List(ctx context.Context) ([]wire.Job, error) {
	kvs, err := b.buckets(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := listKeys(ctx, kvs.jobs, ">")
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	jobs := make([]wire.Job, 0, len(ids))
	for _, id := range ids {
		job, _, err := readRecord(ctx, kvs.jobs, id)
		if errors.Is(err, ErrJobNotFound) {
			continue // deleted while listing
		}
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, job)
	}
	slices.SortFunc(jobs, func(a, b wire.Job) int {
		return cmp.Or(a.Submitted.Compare(b.Submitted), cmp.Compare(a.Spec.ID, b.Spec.ID))
	})
	return jobs, nil
}

// Status returns job id's record and its live status, as its owning
// controller last wrote it. A job no controller has taken yet (queued, or
// cancelled before one did) has none: the status is then the zero
// JobStatus, which HasStatus tells apart.
func (b *Broker) Status(ctx context.Context, id string) (wire.Job, wire.JobStatus, error) {
	job, err := b.Job(ctx, id)
	if err != nil {
		return wire.Job{}, wire.JobStatus{}, err
	}
	kvs, err := b.buckets(ctx)
	if err != nil {
		return wire.Job{}, wire.JobStatus{}, err
	}
	e, err := kvs.status.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return job, wire.JobStatus{}, nil
	}
	if err != nil {
		return wire.Job{}, wire.JobStatus{}, fmt.Errorf("looking up job %s status: %w", id, err)
	}
	st, err := decodeStatus(job, e.Value())
	if err != nil {
		return wire.Job{}, wire.JobStatus{}, err
	}
	return job, st, nil
}

// HasStatus reports whether st is a status a controller wrote, rather than
// the zero JobStatus of a job no controller has taken yet.
func HasStatus(st wire.JobStatus) bool { return st.Job != "" }

// decodeStatus decodes a status entry of job. One written before job was
// submitted belongs to an earlier job of the same id (a controller's last
// write racing Delete) and counts as none.
func decodeStatus(job wire.Job, data []byte) (wire.JobStatus, error) {
	var st wire.JobStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return wire.JobStatus{}, fmt.Errorf("decoding job %s status: %w", job.Spec.ID, err)
	}
	if st.Job != job.Spec.ID || st.Updated.Before(job.Submitted) {
		return wire.JobStatus{}, nil
	}
	return st, nil
}

// finalStatusWait is how long Watch waits, once the record is terminal,
// for the controller's last status write to say so too.
const finalStatusWait = 3 * time.Second

// Watch calls each with job id's record and status (see Status) now and
// then at every change of either, until the job is finished, failed or
// cancelled (it returns nil after the call that shows it), ctx ends (it
// returns ctx's error), the job is deleted (ErrJobNotFound) or each
// returns an error (returned as it is). Once the record is terminal it
// waits up to a few seconds for a terminal status, so the last call shows
// the final counts when a controller writes them.
func (b *Broker) Watch(ctx context.Context, id string, each func(wire.Job, wire.JobStatus) error) error {
	if err := wire.ValidateJobID(id); err != nil {
		return err
	}
	kvs, err := b.buckets(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs, err := kvs.jobs.Watch(ctx, id)
	if err != nil {
		return fmt.Errorf("watching job %s: %w", id, err)
	}
	defer func() { _ = jobs.Stop() }()
	statuses, err := kvs.status.Watch(ctx, id)
	if err != nil {
		return fmt.Errorf("watching job %s status: %w", id, err)
	}
	defer func() { _ = statuses.Stop() }()

	w := &jobWatch{id: id, status: kvs.status, each: each}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-jobs.Updates():
			if !ok && ctx.Err() != nil {
				return ctx.Err() // the watcher stopped because ctx ended
			}
			if err := w.jobUpdate(e, ok); err != nil {
				return err
			}
		case e, ok := <-statuses.Updates():
			if !ok && ctx.Err() != nil {
				return ctx.Err()
			}
			fresh, err := w.statusUpdate(e, ok)
			if err != nil {
				return err
			}
			if !fresh {
				continue // read already, by the Get in report
			}
		case <-w.deadline:
			return nil
		}
		if !w.jobsReady || !w.statsReady {
			continue
		}
		if done, err := w.report(ctx); done || err != nil {
			return err
		}
	}
}

// jobWatch is what Watch has seen of a job's record and status.
type jobWatch struct {
	id     string
	status jetstream.KeyValue
	each   func(wire.Job, wire.JobStatus) error

	job        wire.Job
	recorded   bool
	rawStatus  []byte
	statusRev  uint64
	jobsReady  bool // the watcher's initial values are in
	statsReady bool
	deadline   <-chan time.Time // set once the record is terminal
}

// jobUpdate takes an update of the job's record (e nil: the initial values
// are in); an error ends the watch.
func (w *jobWatch) jobUpdate(e jetstream.KeyValueEntry, ok bool) error {
	gone := fmt.Errorf("job %s: %w", w.id, ErrJobNotFound)
	if !ok {
		return fmt.Errorf("watching job %s: watcher stopped", w.id)
	}
	if e == nil {
		w.jobsReady = true
		if !w.recorded {
			return gone
		}
		return nil
	}
	if e.Operation() != jetstream.KeyValuePut {
		return gone
	}
	var j wire.Job // not into job: fields left out must not keep old values
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return fmt.Errorf("decoding job %s record: %w", w.id, err)
	}
	w.job, w.recorded = j, true
	return nil
}

// statusUpdate takes an update of the job's status (e nil: the initial
// values are in); fresh is false for a revision read already.
func (w *jobWatch) statusUpdate(e jetstream.KeyValueEntry, ok bool) (fresh bool, err error) {
	if !ok {
		return false, fmt.Errorf("watching job %s status: watcher stopped", w.id)
	}
	if e == nil {
		w.statsReady = true
		return true, nil
	}
	if e.Revision() <= w.statusRev {
		return false, nil
	}
	w.rawStatus, w.statusRev = nil, e.Revision()
	if e.Operation() == jetstream.KeyValuePut {
		w.rawStatus = e.Value()
	}
	return true, nil
}

// report calls each with the record and status as they are now; done once
// the call showed the job's end.
func (w *jobWatch) report(ctx context.Context) (done bool, err error) {
	id := w.id
	if w.job.State.Terminal() && w.deadline == nil {
		// The two watchers are not ordered with each other: a status
		// written before the record turned terminal may not be in yet.
		switch e, err := w.status.Get(ctx, id); {
		case err == nil && e.Revision() > w.statusRev:
			w.rawStatus, w.statusRev = e.Value(), e.Revision()
		case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound):
			return true, fmt.Errorf("looking up job %s status: %w", id, err)
		}
	}
	var st wire.JobStatus
	if w.rawStatus != nil {
		if st, err = decodeStatus(w.job, w.rawStatus); err != nil {
			return true, err
		}
	}
	if err := w.each(w.job, st); err != nil {
		return true, err
	}
	if w.job.State.Terminal() {
		if !HasStatus(st) || st.State.Terminal() {
			return true, nil
		}
		if w.deadline == nil {
			w.deadline = time.After(finalStatusWait)
		}
	}
	return false, nil
}
