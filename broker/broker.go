package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/retry"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// ErrJobNotFound means no job record has the id.
var ErrJobNotFound = errors.New("job not found")

// ErrJobExists means a job with the id is already submitted.
var ErrJobExists = errors.New("job already exists")

// ErrJobActive means a job is still queued or running where only a
// finished one may be deleted.
var ErrJobActive = errors.New("job is queued or running")

// activeError names the job and its state, and what to do.
type activeError struct {
	id    string
	state wire.JobState
}

func (e *activeError) Error() string {
	return fmt.Sprintf("job %s is %s: cancel it first or use --force", e.id, e.state)
}

func (e *activeError) Is(target error) bool { return target == ErrJobActive }

// publishWindow is how many task publishes may await their PubAck at once:
// enough to keep the connection busy, well under the client's default limit
// of 4000 outstanding async publishes, which other users of js share.
const publishWindow = 1024

// publishAckTimeout bounds the wait for one window's PubAcks.
const publishAckTimeout = 30 * time.Second

// Bounds on what one job queues in the task stream, checked by Submit
// before anything is stored. Every task of every epoch is queued at
// Submit and stays in the stream (file storage) until an agent acks it,
// so without them one spec within its own bounds (10,000 epochs of any
// number of shards) could fill the file store every job shares.
//
// A window of epochs queued at a time would bound the stream without
// bounding epochs, but it needs an owner that queues each next epoch as
// one drains, exactly once across controller takeovers and agents'
// replays; the cap keeps Submit the one writer of a job's tasks and the
// record the whole of its work. A job over it is split by the user
// (fewer epochs per job, or fewer, larger shards), told so at Submit.
const (
	// MaxJobTasks bounds a job's tasks (shards x epochs): 10,000 epochs
	// of 100 shards, or 100 epochs of 10,000 shards.
	MaxJobTasks = 1_000_000
	// MaxJobTaskBytes bounds what a job's tasks take in the stream: the
	// tasks (their shard keys mostly), subjects and message ids.
	MaxJobTaskBytes = 256 << 20
)

// rollbackTimeout bounds the cleanup of a Submit that failed half way.
const rollbackTimeout = 10 * time.Second

// queueRetryWindow bounds how long a Submit retries queueing its tasks
// through a transient JetStream failure (a stream electing its leader).
const queueRetryWindow = time.Minute

// Broker submits, lists, watches, cancels and deletes jobs. It needs no
// controller running: what it changes is all in JetStream.
type Broker struct {
	js   jetstream.JetStream
	s3   *s3.Client
	log  *slog.Logger
	opts streams.Options
	// check checks a job spec before Submit (WithSpecCheck).
	check SpecCheck

	mu  sync.Mutex
	kvs *buckets // set once the streams are ensured
}

// buckets are the key-value buckets a broker reads and writes.
type buckets struct {
	jobs, status, leases, readers, dispatch jetstream.KeyValue
}

// StreamOptions apply to the streams and buckets a Broker creates
// (Replicas: 3 on a NATS cluster). An alias of the internal definition, so
// that programs outside this module can give them.
type StreamOptions = streams.Options

// New builds a broker. s3c lists datasets at submission (nil: Submit
// refuses); logger nil discards. Streams are ensured on first use, with
// opts.
func New(js jetstream.JetStream, s3c *s3.Client, opts StreamOptions, logger *slog.Logger) *Broker {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Broker{js: js, s3: s3c, log: logger, opts: opts}
}

// buckets opens the buckets once, creating the streams and buckets
// first if any is missing. Existing ones are left as they are: a command
// run without the cluster's stream replicas must not change them. What a
// cluster that cannot answer yet fails with is retried (retry.JetStream).
func (b *Broker) buckets(ctx context.Context) (*buckets, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kvs != nil {
		return b.kvs, nil
	}
	// A NATS cluster still forming cannot answer yet: retried, with a
	// Warn line each time, until ctx ends.
	var kvs *buckets
	err := retry.JetStream(ctx, b.log, b.js.Conn(), "opening streams and buckets", func(ctx context.Context) error {
		var err error
		if kvs, err = b.openBuckets(ctx); err == nil {
			return nil
		}
		if err := streams.Ensure(ctx, b.js, b.opts); err != nil {
			return err
		}
		kvs, err = b.openBuckets(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	b.kvs = kvs
	return kvs, nil
}

// openBuckets opens the buckets, and checks that the task stream exists.
func (b *Broker) openBuckets(ctx context.Context) (*buckets, error) {
	if _, err := b.js.Stream(ctx, wire.TaskStream); err != nil {
		return nil, fmt.Errorf("opening stream %s: %w", wire.TaskStream, err)
	}
	var kvs buckets
	for _, o := range []struct {
		kv   *jetstream.KeyValue
		name string
	}{{&kvs.jobs, wire.JobsBucket}, {&kvs.status, wire.StatusBucket}, {&kvs.leases, wire.LeasesBucket}, {&kvs.readers, wire.ReadersBucket}, {&kvs.dispatch, wire.DispatchBucket}} {
		kv, err := b.js.KeyValue(ctx, o.name)
		if err != nil {
			return nil, fmt.Errorf("opening key-value bucket %s: %w", o.name, err)
		}
		*o.kv = kv
	}
	return &kvs, nil
}

// jobsBucket returns the jobs bucket (see buckets).
func (b *Broker) jobsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kvs, err := b.buckets(ctx)
	if err != nil {
		return nil, err
	}
	return kvs.jobs, nil
}

// SubmitOption sets what a job record holds besides its spec.
type SubmitOption func(*wire.Job)

// WithTeamKey lets the job's agents connect to NATS as the job with key,
// its team key: the record holds the hash of their password
// (wire.AgentPasswordHash) and the public key that certifies its nodes'
// credentials (wire.JobNodeKey), never the key.
func WithTeamKey(key []byte) SubmitOption {
	return func(j *wire.Job) {
		j.AgentAuth = wire.AgentPasswordHash(wire.AgentNATSPassword(key))
		j.NodeKey = wire.JobNodeKey(key)
	}
}

// Submit checks spec (its SpecCheck, after WithDefaults), lists its
// dataset's shards, records the job, creates its task consumer (the queue
// its agents share, streams.Dispatch) and queues one task per shard per
// epoch, each epoch in ShardOrder. It returns once every task is stored. A
// Submit that fails after recording the job removes what it created, so it
// can simply be retried.
func (b *Broker) Submit(ctx context.Context, spec wire.JobSpec, opts ...SubmitOption) (wire.Job, error) {
	spec = spec.WithDefaults()
	if err := b.checkSpec(spec); err != nil {
		return wire.Job{}, err
	}
	id := spec.ID
	if b.s3 == nil {
		return wire.Job{}, fmt.Errorf("job %s: broker has no s3 client to list its shards", id)
	}
	kv, err := b.jobsBucket(ctx)
	if err != nil {
		return wire.Job{}, err
	}
	if _, err := kv.Get(ctx, id); err == nil {
		return wire.Job{}, fmt.Errorf("job %s: %w (delete it first)", id, ErrJobExists)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.Job{}, fmt.Errorf("looking up job %s: %w", id, err)
	}
	job, err := b.listShards(ctx, spec)
	if err != nil {
		return wire.Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	now := time.Now().UTC()
	job.Submitted, job.State, job.Updated = now, wire.JobQueued, now
	for _, o := range opts {
		o(&job)
	}
	if err := checkTaskBounds(job); err != nil {
		return wire.Job{}, err
	}

	record, err := json.Marshal(job)
	if err != nil {
		return wire.Job{}, fmt.Errorf("job %s: encoding record: %w", id, err)
	}
	// Create, not Put: of two concurrent Submits of one id only one wins.
	if _, err := kv.Create(ctx, id, record); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return wire.Job{}, fmt.Errorf("job %s: %w (delete it first)", id, ErrJobExists)
		}
		return wire.Job{}, fmt.Errorf("job %s: storing record: %w", id, err)
	}
	start := time.Now()
	// The consumer exists before the first task: the work-queue stream
	// then holds every task for the job's agents, which bind to it.
	// A stream whose leader was on a lost member answers again once the
	// others elect one: retried for a while (a resent task is dropped as a
	// duplicate, by its Nats-Msg-Id).
	qctx, cancel := context.WithTimeout(ctx, queueRetryWindow)
	defer cancel()
	err = retry.Do(qctx, b.log, retry.Startup(), "queueing the job's tasks", retry.Transient, func(ctx context.Context) error {
		if err := b.createConsumer(ctx, id); err != nil {
			return err
		}
		return b.queueTasks(ctx, job)
	})
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if _, rerr := b.remove(rctx, id); rerr != nil {
			b.log.Warn("rolling back failed submit", "job", id, "err", rerr)
		}
		return wire.Job{}, err
	}
	b.log.Info("job submitted", "job", id, "dataset", spec.Dataset, "sources", len(spec.Sources), "shards", len(job.Shards),
		"epochs", spec.Epochs, "tasks", job.Tasks(), "queue_s", time.Since(start).Seconds())
	return job, nil
}

// listShards is job's record before its submission: the shards of its
// dataset, or of each source and its part of an epoch (EpochSlots).
func (b *Broker) listShards(ctx context.Context, spec wire.JobSpec) (wire.Job, error) {
	if len(spec.Sources) == 0 {
		bucket, prefix, err := objstore.ParseURL(spec.Dataset)
		if err != nil {
			return wire.Job{}, err
		}
		shards, err := objstore.ListShards(ctx, b.s3, bucket, prefix)
		if err != nil {
			return wire.Job{}, err
		}
		return wire.Job{Spec: spec, Bucket: bucket, Shards: shards}, nil
	}
	lists := make([][]string, len(spec.Sources))
	listed := make([]int, len(spec.Sources))
	buckets := make([]string, len(spec.Sources))
	for i, src := range spec.Sources {
		bucket, prefix, err := objstore.ParseURL(src.Dataset)
		if err != nil {
			return wire.Job{}, fmt.Errorf("sources[%d].dataset: %w", i, err)
		}
		if lists[i], err = objstore.ListShards(ctx, b.s3, bucket, prefix); err != nil {
			return wire.Job{}, fmt.Errorf("sources[%d].dataset: %w", i, err)
		}
		listed[i], buckets[i] = len(lists[i]), bucket
	}
	slots, err := EpochSlots(spec.Seed, spec, listed)
	if err != nil {
		return wire.Job{}, err
	}
	job := wire.Job{Spec: spec, Sources: make([]wire.JobSource, len(slots))}
	for i, ss := range slots {
		job.Sources[i] = wire.JobSource{Bucket: buckets[i], Listed: listed[i], First: len(job.Shards), Slots: len(ss)}
		for _, s := range ss {
			job.Shards = append(job.Shards, lists[i][s])
		}
	}
	return job, nil
}

// checkTaskBounds refuses a job whose tasks would pass MaxJobTasks or
// MaxJobTaskBytes, naming the bound and the job's figure.
func checkTaskBounds(job wire.Job) error {
	id, shards, epochs := job.Spec.ID, len(job.Shards), job.Spec.Epochs
	if n := int64(shards) * int64(epochs); n > MaxJobTasks {
		return fmt.Errorf("job %s: %d tasks (%d shards x %d epochs), over the limit of %d tasks a job may queue: "+
			"submit fewer epochs per job, or fewer, larger shards",
			id, n, shards, epochs, MaxJobTasks)
	}
	if b := taskBytes(job); b > MaxJobTaskBytes {
		return fmt.Errorf("job %s: its %d tasks (%d shards x %d epochs) take about %d MiB in the task stream, over the limit of %d MiB a job may queue "+
			"(long shard keys: %d bytes on average): submit fewer epochs per job, or fewer shards",
			id, shards*epochs, shards, epochs, b>>20, MaxJobTaskBytes>>20, keyBytes(job.Shards)/int64(shards))
	}
	return nil
}

// taskBytes is at least what job's tasks take in the task stream: each
// shard's task as encoded for the last epoch (the longest epoch number),
// its subject and message id (queueTasks), times the epochs.
func taskBytes(job wire.Job) int64 {
	last := job.Spec.Epochs - 1
	subject := int64(len(wire.TaskSubject(job.Spec.ID)))
	nonce := int64(len(strconv.FormatInt(job.Submitted.UnixNano(), 36)))
	var per int64
	for shard := range job.Shards {
		t := job.Task(last, shard)
		data, err := json.Marshal(t)
		if err != nil {
			return math.MaxInt64 // a task that cannot be encoded is not queued either
		}
		per += int64(len(data)) + subject + int64(len(t.ID())) + 1 + nonce
	}
	return per * int64(job.Spec.Epochs)
}

// keyBytes is the length of keys, added up.
func keyBytes(keys []string) int64 {
	var n int64
	for _, k := range keys {
		n += int64(len(k))
	}
	return n
}

// createConsumer creates job id's task consumer, with the default ack
// wait (the owning controller sets its own). The job record is already
// visible: a controller may have taken the job and created the consumer
// with its own ack wait first, which Create (not CreateOrUpdate) keeps.
func (b *Broker) createConsumer(ctx context.Context, id string) error {
	cfg := streams.Dispatch(id, 0)
	_, err := b.js.CreateConsumer(ctx, wire.TaskStream, cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("job %s: creating task consumer %s: %w", id, cfg.Durable, err)
	}
	return nil
}

// queueTasks publishes the job's tasks, epoch by epoch, asynchronously in
// windows, and returns once each is stored. The Nats-Msg-Id is the task id
// qualified by the submission time: a publish resent within this Submit is
// dropped as a duplicate, while a job deleted and submitted again under the
// same id (within the duplicate window, which a purge does not clear) still
// gets its tasks queued.
func (b *Broker) queueTasks(ctx context.Context, job wire.Job) error {
	id := job.Spec.ID
	subject := wire.TaskSubject(id)
	nonce := strconv.FormatInt(job.Submitted.UnixNano(), 36)
	pending := make([]jetstream.PubAckFuture, 0, publishWindow)
	duplicates := 0
	// wait collects the window's acks. It waits for all of them even after
	// an error, so that a rollback's purge comes after the last store.
	wait := func() error {
		wctx, cancel := context.WithTimeout(ctx, publishAckTimeout)
		defer cancel()
		var first error
		for _, f := range pending {
			select {
			case ack := <-f.Ok():
				if ack.Duplicate {
					duplicates++
				}
			case err := <-f.Err():
				if first == nil {
					first = fmt.Errorf("job %s: queueing task (msg id %s): %w", id, f.Msg().Header.Get(jetstream.MsgIDHeader), err)
				}
			case <-wctx.Done():
				return fmt.Errorf("job %s: waiting for task publish acks: %w", id, wctx.Err())
			}
		}
		pending = pending[:0]
		return first
	}
	for epoch := 0; epoch < job.Spec.Epochs; epoch++ {
		for _, shard := range epochOrder(job, epoch) {
			task := job.Task(epoch, shard)
			data, err := json.Marshal(task)
			if err != nil {
				return fmt.Errorf("job %s: encoding task %s: %w", id, task.ID(), err)
			}
			f, err := b.js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: data},
				jetstream.WithMsgID(task.ID()+"@"+nonce),
				jetstream.WithExpectStream(wire.TaskStream),
				jetstream.WithStallWait(publishAckTimeout))
			if err != nil {
				_ = wait()
				return fmt.Errorf("job %s: queueing task %s: %w", id, task.ID(), err)
			}
			pending = append(pending, f)
			if len(pending) == publishWindow {
				if err := wait(); err != nil {
					return err
				}
			}
		}
	}
	if err := wait(); err != nil {
		return err
	}
	if duplicates > 0 {
		b.log.Warn("task publishes dropped as duplicates", "job", id, "duplicates", duplicates)
	}
	return nil
}

// Job returns the record of job id.
func (b *Broker) Job(ctx context.Context, id string) (wire.Job, error) {
	if err := wire.ValidateJobID(id); err != nil {
		return wire.Job{}, err
	}
	kv, err := b.jobsBucket(ctx)
	if err != nil {
		return wire.Job{}, err
	}
	job, _, err := readRecord(ctx, kv, id)
	return job, err
}

// readRecord reads job id's record and its revision.
func readRecord(ctx context.Context, kv jetstream.KeyValue, id string) (wire.Job, uint64, error) {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.Job{}, 0, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return wire.Job{}, 0, fmt.Errorf("looking up job %s: %w", id, err)
	}
	var job wire.Job
	if err := json.Unmarshal(e.Value(), &job); err != nil {
		return wire.Job{}, 0, fmt.Errorf("decoding job %s record: %w", id, err)
	}
	return job, e.Revision(), nil
}

// Delete removes job id and everything of it: its task consumer, its
// remaining tasks, its dispatch plan, the readers' positions, its status,
// its lease and its record. A job still
// queued or running is refused with an error matching ErrJobActive unless
// force, which cancels it first (see Cancel). A controller owning the job
// sees it cancelled or gone and lets it go.
func (b *Broker) Delete(ctx context.Context, id string, force bool) error {
	job, err := b.Job(ctx, id) // checks the id too
	switch {
	case errors.Is(err, ErrJobNotFound): // remove what a half-finished Submit or Delete left
	case err != nil:
		return err
	case !job.State.Terminal() && !force:
		return &activeError{id: id, state: job.State}
	case !job.State.Terminal():
		// Cancelled first, so that the owning controller lets the job go
		// before the tasks do; one that finished meanwhile is fine too.
		if _, err := b.Cancel(ctx, id, "deleted with --force"); err != nil && !errors.Is(err, ErrTransition) {
			return err
		}
	}
	found, err := b.remove(ctx, id)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	b.log.Info("job deleted", "job", id, "force", force)
	return nil
}

// remove deletes whatever of job id exists, the record last so that the id
// stays taken until the rest is gone, and says whether anything did.
func (b *Broker) remove(ctx context.Context, id string) (found bool, err error) {
	kvs, err := b.buckets(ctx)
	if err != nil {
		return false, err
	}
	_, err = kvs.jobs.Get(ctx, id)
	recorded := err == nil
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, fmt.Errorf("looking up job %s: %w", id, err)
	}
	released, err := b.release(ctx, id)
	found = recorded || released
	if err != nil {
		return found, err
	}
	// Every reader's position, declared or not: job ids hold no dots, so
	// the wildcard matches this job's readers only.
	readers, err := listKeys(ctx, kvs.readers, wire.ReaderKey(id, "*"))
	if err != nil {
		return found, fmt.Errorf("job %s: listing reader positions: %w", id, err)
	}
	done, err := listKeys(ctx, kvs.readers, wire.ReaderDoneKey(id, "*"))
	if err != nil {
		return found, fmt.Errorf("job %s: listing readers done: %w", id, err)
	}
	// And the agents' record of the tasks they gave up.
	for _, k := range append(append(readers, done...), wire.ShardsFailedKey(id)) {
		gone, err := purgeKey(ctx, kvs.readers, k)
		if err != nil {
			return found, fmt.Errorf("job %s: deleting reader position %s: %w", id, k, err)
		}
		found = found || gone
	}
	for _, kv := range []jetstream.KeyValue{kvs.status, kvs.leases} {
		gone, err := purgeKey(ctx, kv, id)
		if err != nil {
			return found, fmt.Errorf("job %s: deleting from %s: %w", id, kv.Bucket(), err)
		}
		found = found || gone
	}
	if recorded {
		if err := kvs.jobs.Purge(ctx, id); err != nil {
			return found, fmt.Errorf("job %s: deleting record: %w", id, err)
		}
	}
	return found, nil
}

// purgeKey removes key with its history if it exists, and says whether it
// did. A key never written gets no purge marker.
func purgeKey(ctx context.Context, kv jetstream.KeyValue, key string) (bool, error) {
	if _, err := kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, kv.Purge(ctx, key)
}

// listKeys lists the keys of kv matching filter.
func listKeys(ctx context.Context, kv jetstream.KeyValue, filter string) ([]string, error) {
	l, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	// The lister ends quietly when ctx does: a short list must not pass
	// for a complete one.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}
