package traineragent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// Open waits for job id's record to appear in wire.JobsBucket (logging
// that it waits) and prepares an agent for it, as New does: a process
// separate from the broker needs only the job id. A job already cancelled
// or failed is refused with an error wrapping ErrJobEnded.
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
		kv, err = js.KeyValue(ctx, wire.JobsBucket)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("opening the job store (bucket %s): %w", wire.JobsBucket, err)
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
		return New(nc, js, job, opts, logger, m, reg)
	}
}

// jobEnded returns an error wrapping ErrJobEnded if entry (of the job's
// record) says the job is gone: deleted, cancelled or failed.
func jobEnded(id string, e jetstream.KeyValueEntry) error {
	if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		return fmt.Errorf("%w: job %s was deleted", ErrJobEnded, id)
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
		return fmt.Errorf("%w: job %s was %s: %s", ErrJobEnded, id, job.State, reason)
	}
	return nil
}

// submitted identifies the job's submission in its position.
func (a *Reader) submitted() string {
	if a.job.Submitted.IsZero() {
		return ""
	}
	return a.job.Submitted.UTC().Format(time.RFC3339Nano)
}

// checkJob reads the job's record once and returns an error wrapping
// ErrJobEnded if the job is gone, else nil.
func checkJob(ctx context.Context, jobs jetstream.KeyValue, id string) error {
	if ctx.Err() != nil {
		return nil
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := jobs.Get(gctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w: job %s was deleted", ErrJobEnded, id)
	case err != nil:
		return nil
	}
	return jobEnded(id, e)
}

// positionKey is where the reader's position is stored.
func (a *Reader) positionKey() string { return wire.ReaderKey(a.job.Spec.ID, a.reader) }

// loadPosition reads the reader's position, if one was recorded, and
// restores it, so the agent resumes where its predecessor's batches ended.
func (a *Reader) loadPosition(ctx context.Context, js jetstream.JetStream) error {
	kv, err := js.KeyValue(ctx, wire.ReadersBucket)
	if err != nil {
		return fmt.Errorf("opening reader positions (bucket %s): %w", wire.ReadersBucket, err)
	}
	key := a.positionKey()
	var rev uint64
	var p *position
	var recorded []byte
	switch e, err := kv.Get(ctx, key); {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return fmt.Errorf("reading the position of reader %s: %w", a.reader, err)
	default:
		got, err := decodePosition(e.Value())
		if err != nil {
			return fmt.Errorf("position of reader %s (key %s): %w", a.reader, key, err)
		}
		rev = e.Revision()
		if got.Submitted == a.submitted() {
			p = &got
			recorded = e.Value()
		} else {
			a.log.Warn("ignoring the position of an earlier job under this id", "key", key,
				"position_of", got.Submitted, "job_submitted", a.submitted())
		}
	}
	a.posMu.Lock()
	a.posKV, a.posRev, a.recorded = kv, rev, recorded
	a.posMu.Unlock()
	a.resetDurable(p)

	a.mu.Lock()
	defer a.mu.Unlock()
	if p != nil {
		if err := a.asm.restore(*p); err != nil {
			return fmt.Errorf("position of reader %s (key %s): %w", a.reader, key, err)
		}
		a.log.Info("resuming from the recorded position", "finished_epochs", a.asm.finished,
			"bytes", len(mustEncode(*p)))
	}
	a.epochsFinished(a.asm.start(), time.Now())
	a.written = a.asm.version
	a.loaded = true
	a.notify()
	return nil
}

// writeDone records under wire.ReaderDoneKey that every rank of the reader
// reached the end of the last epoch and its consumer settled: the
// controller succeeds the job only with this key of each declared reader
// (for this submission), so that a trainer crashing before its last step
// can still resume from a checkpoint.
func (a *Reader) writeDone(ctx context.Context) error {
	data, err := json.Marshal(wire.ReaderDone{Submitted: a.job.Submitted, Time: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("encoding the done record: %w", err)
	}
	a.posMu.Lock()
	kv := a.posKV
	a.posMu.Unlock()
	key := wire.ReaderDoneKey(a.job.Spec.ID, a.reader)
	wctx, cancel := context.WithTimeout(ctx, positionWriteTimeout)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		_, err := kv.Put(wctx, key, data)
		if err == nil {
			return nil
		}
		a.log.Warn("writing the reader's done record; retrying", "error", err)
		if err := sleepCtx(wctx, wait); err != nil {
			return fmt.Errorf("writing %s: %w", key, err)
		}
	}
}

func mustEncode(p position) []byte {
	data, _ := encodePosition(p)
	return data
}

// sync writes the position if it changed since the last write, then
// reports the shards it completed (their tasks may be settled). Writes are
// serialised, and each writes the latest position, so a later write never
// records less than an earlier. forBatch says that a batch taken from
// memory is returned only if this succeeds: if it fails, no later write may
// record that batch, so none happens at all.
func (a *Reader) sync(ctx context.Context, forBatch bool) error {
	a.posMu.Lock()
	defer a.posMu.Unlock()
	if a.posBroken {
		// The memory may hold batches that were never returned: writing
		// it now would record them as delivered.
		return errors.New("an earlier position write failed")
	}
	a.mu.Lock()
	version := a.asm.version
	var data []byte
	var err error
	if version != a.written {
		p := a.asm.snapshot()
		p.Submitted = a.submitted()
		data, err = encodePosition(p)
	}
	completed := a.asm.takeCompleted()
	finished := a.asm.finished
	a.mu.Unlock()
	if err != nil {
		return err
	}
	if data != nil {
		if err := a.writePosition(ctx, data); err != nil {
			a.posBroken = a.posBroken || forBatch
			// Not recorded: report them after the next write.
			a.mu.Lock()
			a.asm.completed = append(completed, a.asm.completed...)
			a.mu.Unlock()
			return err
		}
		a.written, a.recorded = version, data
		a.m.positionBytes.Set(float64(len(data)))
	}
	a.markDurable(completed, finished)
	a.completed(completed)
	return nil
}

// durableComplete reports whether the recorded position has shard s
// complete: its epoch finished, or the shard reported complete by a write
// since the position was loaded (or rewound), or complete in the one
// loaded.
func (a *Reader) durableComplete(s shardRef) bool {
	a.durableMu.Lock()
	defer a.durableMu.Unlock()
	return s.epoch < a.durableFinished || a.durable[s] ||
		a.base != nil && (a.base.shardComplete(s.epoch, s.shard) || a.base.owes(s.epoch, s.shard))
}

// markDurable notes shards the recorded position has complete, and the
// epochs it has finished (whose notes it drops).
func (a *Reader) markDurable(shards []shardRef, finished int) {
	a.durableMu.Lock()
	defer a.durableMu.Unlock()
	for _, s := range shards {
		a.durable[s] = true
	}
	if finished > a.durableFinished {
		a.durableFinished = finished
		for s := range a.durable {
			if s.epoch < finished {
				delete(a.durable, s)
			}
		}
	}
}

// resetDurable starts the notes from position p (nil: none): a load, or a
// resume's rewind, after which shards complete before may be owed again.
func (a *Reader) resetDurable(p *position) {
	var base *assembler
	finished := 0
	if p != nil {
		base = newAssembler(a.job)
		if base.restore(*p) != nil {
			base = nil
		} else {
			finished = p.Finished
		}
	}
	a.durableMu.Lock()
	defer a.durableMu.Unlock()
	a.durable, a.base, a.durableFinished = map[shardRef]bool{}, base, finished
}

// replaysOwed are the tasks of the shards the position notes as being
// replayed and not complete: an agent that restarts sends them again.
func (a *Reader) replaysOwed() []wire.ShardTask {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []wire.ShardTask
	for e, ep := range a.asm.open {
		for s := range a.asm.shards {
			if ep.replayed.has(s) && !ep.complete.has(s) {
				out = append(out, a.job.Task(e, s))
			}
		}
	}
	return out
}

// positionWriteTimeout bounds the retries of one position write; past it
// the agent stops rather than hand out batches it cannot record.
const positionWriteTimeout = 30 * time.Second

// ErrReaderTaken means another agent wrote this reader's position: two
// agents must not read a job as the same reader.
var ErrReaderTaken = errors.New("another agent is reading as this reader")

// writePosition stores data by compare-and-set on the revision this agent
// last wrote (or read), retrying transient failures. a.posMu must be held.
func (a *Reader) writePosition(ctx context.Context, data []byte) error {
	key := a.positionKey()
	deadline := time.Now().Add(positionWriteTimeout)
	wait := 50 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var rev uint64
		var err error
		if a.posRev == 0 {
			rev, err = a.posKV.Create(wctx, key, data)
		} else {
			rev, err = a.posKV.Update(wctx, key, data, a.posRev)
		}
		cancel()
		if err == nil {
			a.posRev = rev
			return nil
		}
		if streams.IsCASConflict(err) {
			// A retried write that did land looks like a conflict.
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			e, gerr := a.posKV.Get(gctx, key)
			cancel()
			if gerr == nil && bytes.Equal(e.Value(), data) {
				a.posRev = e.Revision()
				return nil
			}
			return fmt.Errorf("job %s reader %s: %w (the position under %s changed)", a.job.Spec.ID, a.reader, ErrReaderTaken, key)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("writing %s: %w", key, err)
		}
		a.log.Warn("writing the position; retrying", "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("writing %s: %w", key, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// checkTaken returns an error wrapping ErrReaderTaken if another agent
// wrote the reader's position since this one last did. Two agents of one
// reader split its chunks; one whose chunks make no step of the ranks'
// epoch has nothing to write and would otherwise hold them (and the other
// agent's next step) forever.
func (a *Reader) checkTaken(ctx context.Context) error {
	a.posMu.Lock()
	defer a.posMu.Unlock()
	if a.posKV == nil {
		return nil
	}
	key := a.positionKey()
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := a.posKV.Get(gctx, key)
	if err != nil || e.Revision() == a.posRev {
		return nil // none, or not readable now: the next tick looks again
	}
	return fmt.Errorf("job %s reader %s: %w (the position under %s changed)", a.job.Spec.ID, a.reader, ErrReaderTaken, key)
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
		if err := a.checkTaken(ctx); err != nil {
			a.stop(err)
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
