package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// Options apply to every stream and bucket Sluice creates.
type Options struct {
	// Replicas is the JetStream replication factor: 1 on a single server,
	// 3 on a NATS cluster (0 means 1).
	Replicas int
}

// Validate names a replication factor JetStream would refuse.
func (o Options) Validate() error {
	if o.Replicas < 0 || o.Replicas > 5 {
		return fmt.Errorf("stream replicas %d: want 1..5 (1 on one server, 3 on a cluster)", o.Replicas)
	}
	return nil
}

func (o Options) replicas() int { return max(o.Replicas, 1) }

// TaskDuplicateWindow is how long the task stream remembers a task's
// Nats-Msg-Id, covering retried publishes within a Submit.
const TaskDuplicateWindow = 10 * time.Minute

// OutputDuplicateWindow is how long a job's output stream remembers a
// chunk's Nats-Msg-Id: longer than any redelivery chain of a task.
const OutputDuplicateWindow = time.Hour

// Tasks is the work-queue stream holding one task per shard per epoch.
func Tasks(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        wire.TaskStream,
		Description: "Sluice shard tasks, one per shard per epoch",
		Subjects:    []string{wire.TaskSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  TaskDuplicateWindow,
		Replicas:    o.replicas(),
	}
}

// Buckets are the key-value buckets, each with its description.
func Buckets(o Options) []jetstream.KeyValueConfig {
	kv := func(name, desc string) jetstream.KeyValueConfig {
		return jetstream.KeyValueConfig{Bucket: name, Description: desc, History: 1,
			Storage: jetstream.FileStorage, Replicas: o.replicas()}
	}
	return []jetstream.KeyValueConfig{
		kv(wire.JobsBucket, "Sluice job records"),
		kv(wire.StatusBucket, "Sluice live job status, written by the owning controller"),
		kv(wire.LeasesBucket, "Sluice job leases: which controller owns a job"),
		kv(wire.ReadersBucket, "Sluice reader positions in job outputs"),
		kv(wire.SweepsBucket, "Sluice sweeps: each sweep's jobs and their trials"),
		kv(wire.PlansBucket, "Sluice learned per-replica throughput of pipelines"),
	}
}

// Ensure creates the task stream and the buckets, or updates them to this
// configuration. It is idempotent.
func Ensure(ctx context.Context, js jetstream.JetStream, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg := Tasks(o)
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("creating stream %s: %w", cfg.Name, err)
	}
	for _, b := range Buckets(o) {
		if _, err := js.CreateOrUpdateKeyValue(ctx, b); err != nil {
			return fmt.Errorf("creating key-value bucket %s: %w", b.Bucket, err)
		}
	}
	return nil
}

// Output is the per-job stream functions publish chunks and shard ends to.
// maxPayload is the server's limit on one message. Every reader of the job
// has a durable consumer (Reader) created with the stream, and a chunk
// stays until each of them acked it (interest retention), up to
// OutputBufferBytes: a publish past that fails and the shard is retried
// later; the dispatcher pauses before that. Replayed chunks go to the
// subject of the one reader that asked (wire.ReaderReplaySubject), in the
// same stream.
func Output(spec wire.JobSpec, maxPayload int64, o Options) (jetstream.StreamConfig, error) {
	size := int64(spec.ChunkMaxBytes) + wire.OutputHeadroom
	if size > maxPayload {
		size = maxPayload
	}
	if size < int64(spec.ChunkMaxBytes)+wire.MinOutputHeadroom {
		return jetstream.StreamConfig{}, fmt.Errorf("job %s: chunk max bytes %d: the NATS server takes messages up to %d bytes, want at most %d",
			spec.ID, spec.ChunkMaxBytes, maxPayload, maxPayload-wire.MinOutputHeadroom)
	}
	return jetstream.StreamConfig{
		Name:        wire.OutputStream(spec.ID),
		Description: "Sluice output chunks of job " + spec.ID,
		Subjects:    []string{wire.OutputSubject(spec.ID), wire.ReplayOutputSubjects(spec.ID)},
		Retention:   jetstream.InterestPolicy,
		MaxBytes:    spec.OutputBufferBytes,
		Discard:     jetstream.DiscardNew,
		Storage:     jetstream.FileStorage,
		Duplicates:  OutputDuplicateWindow,
		MaxMsgSize:  int32(size),
		Replicas:    o.replicas(),
	}, nil
}

// ReaderAckWait is how long a reader may hold a chunk unacked before the
// server redelivers it. An agent acks a chunk only once all its samples are
// handed out and pings progress meanwhile, so this bounds how long a dead
// agent's chunks stay stuck, not how slow a trainer may be.
const ReaderAckWait = 30 * time.Second

// Reader is the durable consumer of one reader of job's output: the job's
// chunks and the reader's own replays, not the other readers'.
func Reader(job, reader string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        wire.ReaderConsumer(reader),
		Description:    fmt.Sprintf("Sluice reader %s of job %s", reader, job),
		FilterSubjects: []string{wire.OutputSubject(job), wire.ReaderReplaySubject(job, reader)},
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckWait:        ReaderAckWait,
		MaxDeliver:     -1,
		// Enough for a reader holding a whole prefetch window of chunks.
		MaxAckPending: 65536,
	}
}

// DispatchAckWait is the default time the server waits for a delivered
// task's ack; a task in flight is kept alive with progress pings.
const DispatchAckWait = 30 * time.Second

// dispatchMaxAckPending bounds delivered-but-unacked tasks on the server;
// in flight is bounded by capacity, so this only has to exceed it plus the
// tasks waiting out a retry delay.
const dispatchMaxAckPending = 65536

// Dispatch is the durable consumer through which job's dispatcher pulls its
// tasks. ackWait 0 means DispatchAckWait.
func Dispatch(job string, ackWait time.Duration) jetstream.ConsumerConfig {
	if ackWait <= 0 {
		ackWait = DispatchAckWait
	}
	return jetstream.ConsumerConfig{
		Durable:       wire.DispatchConsumer(job),
		Description:   "Sluice dispatcher of job " + job,
		FilterSubject: wire.TaskSubject(job),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		// The dispatcher counts failures and terminates a task at its
		// MaxDeliver itself. Were the server to stop at MaxDeliver, a task
		// whose last delivery merely timed out would vanish unreported.
		MaxDeliver:    -1,
		MaxAckPending: dispatchMaxAckPending,
	}
}

// Replay is the durable consumer through which job's dispatcher pulls its
// replay tasks (wire.ReplaySubject), taken before the job's queued tasks.
// ackWait 0 means DispatchAckWait.
func Replay(job string, ackWait time.Duration) jetstream.ConsumerConfig {
	cfg := Dispatch(job, ackWait)
	cfg.Durable = wire.ReplayConsumer(job)
	cfg.Description = "Sluice replays of job " + job
	cfg.FilterSubject = wire.ReplaySubject(job)
	return cfg
}

// IsCASConflict reports whether err from a key-value Create or Update
// with a revision means the entry changed under the caller (or exists). On
// a replicated bucket (R>1) the server reports a conflict with another
// code than on one server; nats.go maps both to ErrKeyRevisionMismatch,
// which a check of ErrKeyExists or the one-server code alone misses.
func IsCASConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
