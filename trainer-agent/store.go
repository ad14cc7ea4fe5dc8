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

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// Open waits for job id's record to appear in wire.JobsBucket (logging
// that it waits) and prepares an agent for it, as New does: a process
// separate from the broker needs only the job id. A job already cancelled
// or failed is refused with an error wrapping ErrJobEnded.
func Open(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, id string, opts Options, logger *slog.Logger, m *Metrics) (*Agent, error) {
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
		return New(nc, js, job, opts, logger, m)
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

// watchJob stops the agent when the job's record says it was cancelled,
// failed or deleted.
func (a *Agent) watchJob(ctx context.Context, jobs jetstream.KeyValue) {
	w, err := jobs.Watch(ctx, a.job.Spec.ID)
	if err != nil {
		a.log.Warn("watching the job record; a cancelled job will not stop this agent", "error", err)
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			err := jobEnded(a.job.Spec.ID, e)
			if err == nil && a.succeededWithoutMe(e) {
				err = fmt.Errorf("%w: job %s succeeded: another agent of reader %s delivered what this one had not", ErrJobEnded, a.job.Spec.ID, a.reader)
			}
			if err != nil {
				a.log.Warn("stopping", "reason", err)
				a.stop(err)
				return
			}
		}
	}
}

// submitted identifies the job's submission in its position.
func (a *Agent) submitted() string {
	if a.job.Submitted.IsZero() {
		return ""
	}
	return a.job.Submitted.UTC().Format(time.RFC3339Nano)
}

// checkJob reads the job's record once and returns an error wrapping
// ErrJobEnded if the job is gone, else nil.
func (a *Agent) checkJob(ctx context.Context, jobs jetstream.KeyValue) error {
	if ctx.Err() != nil {
		return nil
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := jobs.Get(gctx, a.job.Spec.ID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w: job %s was deleted", ErrJobEnded, a.job.Spec.ID)
	case err != nil:
		return nil
	}
	return jobEnded(a.job.Spec.ID, e)
}

// succeededWithoutMe reports whether the job's record says it succeeded
// while this agent has not handed out everything: a job succeeds only once
// every reader acked every chunk, so another agent of this reader did.
func (a *Agent) succeededWithoutMe(e jetstream.KeyValueEntry) bool {
	var job wire.Job
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &job) != nil || job.State != wire.JobSucceeded {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.asm.allFinished()
}

// positionKey is where the reader's position is stored.
func (a *Agent) positionKey() string { return wire.ReaderKey(a.job.Spec.ID, a.reader) }

// loadPosition reads the reader's position, if one was recorded, and
// restores it, so the agent resumes where its predecessor's batches ended.
func (a *Agent) loadPosition(ctx context.Context) error {
	kv, err := a.js.KeyValue(ctx, wire.ReadersBucket)
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
func (a *Agent) writeDone(ctx context.Context) error {
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

// sync writes the position if it changed since the last write, then acks
// the messages that waited for it. Writes are serialised, and each writes
// the latest position, so a later write never records less than an earlier.
// forBatch says that a batch taken from memory is returned only if this
// succeeds: if it fails, no later write may record that batch, so none
// happens at all.
func (a *Agent) sync(ctx context.Context, forBatch bool) error {
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
	acks := a.asm.takeAcks()
	a.mu.Unlock()
	if err != nil {
		return err
	}
	if data != nil {
		if err := a.writePosition(ctx, data); err != nil {
			a.posBroken = a.posBroken || forBatch
			// Not recorded, so not to be acked: keep them for release.
			a.mu.Lock()
			a.asm.acks = append(acks, a.asm.acks...)
			a.mu.Unlock()
			return err
		}
		a.written, a.recorded = version, data
		a.m.positionBytes.Set(float64(len(data)))
	}
	a.ackAll(acks)
	return nil
}

// positionWriteTimeout bounds the retries of one position write; past it
// the agent stops rather than hand out batches it cannot record.
const positionWriteTimeout = 30 * time.Second

// ErrReaderTaken means another agent wrote this reader's position: two
// agents must not read a job as the same reader.
var ErrReaderTaken = errors.New("another agent is reading as this reader")

// writePosition stores data by compare-and-set on the revision this agent
// last wrote (or read), retrying transient failures. a.posMu must be held.
func (a *Agent) writePosition(ctx context.Context, data []byte) error {
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
func (a *Agent) checkTaken(ctx context.Context) error {
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

// keepAlive flushes acks waiting for a position write (shard ends, copies)
// and tells the server that the chunks still held are in progress, so that
// it does not redeliver them after streams.ReaderAckWait while a slow
// trainer works through them.
func (a *Agent) keepAlive(ctx context.Context) {
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
		if err := a.confirmAcks(ctx); err != nil {
			a.log.Debug("keeping acks", "error", err) // tried again on the next tick
		}
		a.mu.Lock()
		held := a.asm.held()
		a.mu.Unlock()
		for _, m := range held {
			if err := m.InProgress(); err != nil {
				a.log.Debug("keeping a held chunk alive", "error", err)
			}
		}
	}
}
