package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// Open waits for job id's record to appear in wire.JobsBucket (logging
// that it waits) and prepares an agent for it, as New does: a process
// separate from the broker needs only the job id. A job already cancelled
// or failed is refused with an error wrapping readerstate.ErrJobEnded.
func Open(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, id string, opts Options, logger *slog.Logger, m *Metrics, reg prometheus.Registerer) (*Agent, error) {
	if err := wire.ValidateJobID(id); err != nil {
		return nil, fmt.Errorf("trainer agent: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("job", id)
	var kv jetstream.KeyValue
	for logged := false; ; logged = true {
		var err error
		kv, err = streams.OpenBucket(ctx, js, wire.JobsBucket, log)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("opening the job store: %w", err)
		}
		if !logged {
			log.Info("waiting for the job store to be created (by a broker or controller)", "bucket", wire.JobsBucket)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	w, err := kv.Watch(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("watching job %s: %w", id, err)
	}
	defer w.Stop()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case got, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watching job %s: the watch ended", id)
			}
			e = got
		}
		if e == nil {
			log.Info("waiting for the job to be submitted")
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var job wire.Job
		if err := json.Unmarshal(e.Value(), &job); err != nil {
			return nil, fmt.Errorf("job %s: decoding its record: %w", id, err)
		}
		if err := jobEnded(id, e); err != nil {
			return nil, err
		}
		// As the controller does: a record written straight into the job
		// store must not point the agent's sends at objects outside its
		// dataset, nor size its readers and epochs.
		if err := broker.CheckRecord(id, job); err != nil {
			return nil, fmt.Errorf("trainer agent: %w", err)
		}
		return New(nc, js, job, opts, logger, m, reg)
	}
}

// jobEnded returns an error wrapping readerstate.ErrJobEnded if entry (of the job's
// record) says the job is gone: deleted, cancelled or failed.
func jobEnded(id string, e jetstream.KeyValueEntry) error {
	if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		return fmt.Errorf("%w: job %s was deleted", readerstate.ErrJobEnded, id)
	}
	var job wire.Job
	if err := json.Unmarshal(e.Value(), &job); err != nil {
		return nil // not ours to judge; the record's writer reports it
	}
	if job.State == wire.JobCancelled || job.State == wire.JobFailed {
		reason := job.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return fmt.Errorf("%w: job %s was %s: %s", readerstate.ErrJobEnded, id, job.State, reason)
	}
	return nil
}

// checkJob reads the job's record once and returns an error wrapping
// readerstate.ErrJobEnded if the job is gone, else nil.
func checkJob(ctx context.Context, jobs jetstream.KeyValue, id string) error {
	if ctx.Err() != nil {
		return nil
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := jobs.Get(gctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w: job %s was deleted", readerstate.ErrJobEnded, id)
	case err != nil:
		return nil
	}
	return jobEnded(id, e)
}

// loadPosition reads the reader's position, if one was recorded, and
// restores it, so the agent resumes where its predecessor's batches ended.
func (a *Reader) loadPosition(ctx context.Context, js jetstream.JetStream) error {
	key := wire.ReaderKey(a.job.Spec.ID, a.reader)
	seals := recordSeals{node: a.node, check: a.check, refused: func(reason string, err error) {
		a.m.nodeRefused.WithLabelValues(reason).Inc()
		a.log.Warn("refused a record of the reader", "reason", reason, "err", err)
	}}
	store, p, err := openPositionStore(ctx, js, key, a.st.Submitted(), seals, a.log)
	if err != nil {
		return fmt.Errorf("reader %s: %w", a.reader, err)
	}
	var base *assembly.Assembler
	if p != nil {
		base = assembly.NewAssembler(a.job)
		if err := base.Restore(*p); err != nil {
			return fmt.Errorf("position of reader %s (key %s): %w", a.reader, key, err)
		}
	}
	a.recorded.Reset(base)

	a.mu.Lock()
	defer a.unlock()
	_ = a.st.Load(p, time.Now()) // as base did
	if p != nil {
		a.log.Info("resuming from the recorded position", "finished_epochs", a.st.Asm.Finished,
			"bytes", len(store.recorded))
	}
	store.written = a.st.Asm.Version
	a.pos = store
	return nil
}

// writeDone records under wire.ReaderDoneKey that every rank of the reader
// reached the end of the last epoch: the controller succeeds the job only
// with this key of each declared reader (for this submission), so that a
// trainer crashing before its last step can still resume from a
// checkpoint.
func (a *Reader) writeDone(ctx context.Context) error {
	data, err := json.Marshal(wire.ReaderDone{Submitted: a.job.Submitted, Time: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("encoding the done record: %w", err)
	}
	return a.pos.put(ctx, wire.ReaderDoneKey(a.job.Spec.ID, a.reader), data)
}

// sync writes the position if it changed since the last write, then
// reports the shards it completed (their tasks may be settled). Writes are
// serialised, and each writes the latest position, so a later write never
// records less than an earlier. forBatch says that a batch taken from
// memory is returned only if this succeeds: if it fails, no later write may
// record that batch, so none happens at all.
func (a *Reader) sync(ctx context.Context, forBatch bool) error {
	return a.record(ctx, forBatch, false)
}

// claim writes the position even if it did not change: a resume takes
// the reader. An agent of an earlier run that still stops (a team's old
// planner, its release) then finds the position changed and does not
// write over it; unclaimed, its write would land and stop this agent at
// its next write instead (ErrReaderTaken).
func (a *Reader) claim(ctx context.Context) error { return a.record(ctx, false, true) }

// record is sync, writing even an unchanged position when force.
func (a *Reader) record(ctx context.Context, forBatch, force bool) error {
	if a.pos == nil {
		return nil // not loaded: nothing handed out, nothing to write
	}
	a.pos.mu.Lock()
	defer a.pos.mu.Unlock()
	if a.pos.broken {
		// The memory may hold batches that were never returned: writing
		// it now would record them as delivered.
		return errors.New("an earlier position write failed")
	}
	a.mu.Lock()
	version, data, completed, finished, err := a.st.ForWrite(a.pos.written, force)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	if data != nil {
		if err := a.pos.write(ctx, data); err != nil {
			a.pos.broken = a.pos.broken || forBatch
			// Not recorded: report them after the next write.
			a.mu.Lock()
			a.st.Unrecorded(completed)
			a.mu.Unlock()
			return fmt.Errorf("job %s reader %s: %w", a.job.Spec.ID, a.reader, err)
		}
		a.pos.written = version
		a.m.positionBytes.Set(float64(len(data)))
	}
	a.recorded.Add(completed, finished)
	a.completed(completed)
	return nil
}

// replaysOwed are the tasks of the shards the position notes as being
// replayed and not complete: an agent that restarts sends them again.
func (a *Reader) replaysOwed() []wire.ShardTask {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.ReplaysOwed()
}

// keepAlive writes the position when it changed without a batch (shard
// ends, chunks with nothing to hand out), so that the tasks of the shards
// it completes are settled, and checks that no other agent took the reader.
func (a *Reader) keepAlive(ctx context.Context) {
	t := time.NewTicker(a.opts.KeepAliveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := a.sync(ctx, false); err != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("recording the position of reader %s: %w", a.reader, err)
				a.stop(err)
			}
			return
		}
		if err := a.pos.taken(ctx); err != nil {
			a.stop(fmt.Errorf("job %s reader %s: %w", a.job.Spec.ID, a.reader, err))
			return
		}
	}
}
