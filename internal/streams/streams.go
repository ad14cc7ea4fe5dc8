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
		kv(wire.DispatchBucket, "Sluice dispatch plans: each running job's replica endpoints and in-flight budget"),
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

// DispatchAckWait is the default time the server waits for a delivered
// task's ack before it redelivers the task to another agent of the job. An
// agent keeps the tasks it holds alive with progress pings, so this bounds
// how long a dead agent's tasks stay stuck, not how long a shard may take.
const DispatchAckWait = 30 * time.Second

// dispatchMaxAckPending bounds delivered-but-unacked tasks on the server.
// An agent holds a task until every sample of its shard was handed out, so
// this has to exceed what all of a job's agents prefetch together.
const dispatchMaxAckPending = 65536

// Dispatch is the durable consumer every agent of job pulls its tasks from
// (wire.DispatchConsumer): one queue the agents share, so a fast node takes
// more shards. The broker creates it at submit, so the tasks are held from
// the start; the owning controller reads its pending counts as the job's
// backlog. ackWait 0 means DispatchAckWait.
func Dispatch(job string, ackWait time.Duration) jetstream.ConsumerConfig {
	if ackWait <= 0 {
		ackWait = DispatchAckWait
	}
	return jetstream.ConsumerConfig{
		Durable:       wire.DispatchConsumer(job),
		Description:   "Sluice task queue of job " + job + ", shared by its agents",
		FilterSubject: wire.TaskSubject(job),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		// An agent counts a task's failed sends and terminates it when it
		// gives up, reporting it. Were the server to stop at a MaxDeliver,
		// a task whose last delivery merely timed out (its agent died)
		// would vanish unreported.
		MaxDeliver:    -1,
		MaxAckPending: dispatchMaxAckPending,
	}
}

// IsCASConflict reports whether err from a key-value Create or Update
// with a revision means the entry changed under the caller (or exists). On
// a replicated bucket (R>1) the server reports a conflict with another
// code than on one server; nats.go maps both to ErrKeyRevisionMismatch,
// which a check of ErrKeyExists or the one-server code alone misses.
func IsCASConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
