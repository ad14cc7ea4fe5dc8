package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// ErrJobNotFound means no job record has the id.
var ErrJobNotFound = errors.New("job not found")

// ErrJobExists means a job with the id is already submitted.
var ErrJobExists = errors.New("job already exists")

// publishWindow is how many task publishes may await their PubAck at once:
// enough to keep the connection busy, well under the client's default limit
// of 4000 outstanding async publishes, which other users of js share.
const publishWindow = 1024

// publishAckTimeout bounds the wait for one window's PubAcks.
const publishAckTimeout = 30 * time.Second

// rollbackTimeout bounds the cleanup of a Submit that failed half way.
const rollbackTimeout = 10 * time.Second

// Broker submits, looks up and deletes jobs.
type Broker struct {
	js   jetstream.JetStream
	s3   *s3.Client
	log  *slog.Logger
	opts streams.Options

	mu   sync.Mutex
	jobs jetstream.KeyValue // set once EnsureStreams succeeded
}

// New builds a broker. s3c lists datasets at submission; logger nil
// discards. Streams are ensured on first use, with opts.
func New(js jetstream.JetStream, s3c *s3.Client, opts streams.Options, logger *slog.Logger) *Broker {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Broker{js: js, s3: s3c, log: logger, opts: opts}
}

// jobsBucket ensures the streams once and returns the jobs bucket.
func (b *Broker) jobsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.jobs != nil {
		return b.jobs, nil
	}
	if err := streams.Ensure(ctx, b.js, b.opts); err != nil {
		return nil, err
	}
	kv, err := b.js.KeyValue(ctx, wire.JobsBucket)
	if err != nil {
		return nil, fmt.Errorf("opening key-value bucket %s: %w", wire.JobsBucket, err)
	}
	b.jobs = kv
	return kv, nil
}

// Submit validates spec, lists its dataset's shards, creates the job's
// output stream and record, and queues one task per shard per epoch, each
// epoch in ShardOrder. It returns once every task is stored. A Submit that
// fails after recording the job removes what it created, so it can simply
// be retried.
func (b *Broker) Submit(ctx context.Context, spec wire.JobSpec) (wire.Job, error) {
	spec = spec.WithDefaults(b.js.Conn().MaxPayload())
	if err := spec.Validate(); err != nil {
		return wire.Job{}, fmt.Errorf("invalid job spec: %w", err)
	}
	id := spec.ID
	bucket, prefix, err := objstore.ParseURL(spec.Dataset)
	if err != nil {
		return wire.Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	if b.s3 == nil {
		return wire.Job{}, fmt.Errorf("job %s: broker has no s3 client to list %s", id, spec.Dataset)
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
	shards, err := objstore.ListShards(ctx, b.s3, bucket, prefix)
	if err != nil {
		return wire.Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	now := time.Now().UTC()
	job := wire.Job{Spec: spec, Bucket: bucket, Shards: shards, Submitted: now, State: wire.JobQueued, Updated: now}

	cfg, err := streams.Output(spec, b.js.Conn().MaxPayload(), b.opts)
	if err != nil {
		return wire.Job{}, err
	}
	if _, err := b.js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return wire.Job{}, fmt.Errorf("job %s: creating output stream %s: %w", id, cfg.Name, err)
	}
	// Readers' consumers exist before the first chunk, so that the
	// interest-retention stream keeps every chunk for each of them.
	for _, r := range spec.Readers {
		if _, err := b.js.CreateOrUpdateConsumer(ctx, cfg.Name, streams.Reader(id, r)); err != nil {
			return wire.Job{}, fmt.Errorf("job %s: creating reader %s: %w", id, r, err)
		}
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
	if err := b.queueTasks(ctx, job); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if _, rerr := b.remove(rctx, id); rerr != nil {
			b.log.Warn("rolling back failed submit", "job", id, "err", rerr)
		}
		return wire.Job{}, err
	}
	b.log.Info("job submitted", "job", id, "dataset", spec.Dataset, "shards", len(shards),
		"epochs", spec.Epochs, "tasks", job.Tasks(), "queue_s", time.Since(start).Seconds())
	return job, nil
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
		for _, shard := range ShardOrder(job.Spec.Seed, epoch, len(job.Shards)) {
			task := wire.ShardTask{
				Job:           id,
				Epoch:         epoch,
				Shard:         shard,
				Bucket:        job.Bucket,
				Key:           job.Shards[shard],
				Pipeline:      job.Spec.Pipeline,
				Seed:          job.Spec.Seed,
				ChunkMaxBytes: job.Spec.ChunkMaxBytes,
				OutputSubject: wire.OutputSubject(id),
			}
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
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.Job{}, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return wire.Job{}, fmt.Errorf("looking up job %s: %w", id, err)
	}
	var job wire.Job
	if err := json.Unmarshal(e.Value(), &job); err != nil {
		return wire.Job{}, fmt.Errorf("decoding job %s record: %w", id, err)
	}
	return job, nil
}

// Delete removes job id: its dispatcher's consumer, its remaining tasks,
// its output stream and its record. Stop the job's dispatcher first.
func (b *Broker) Delete(ctx context.Context, id string) error {
	if err := wire.ValidateJobID(id); err != nil {
		return err
	}
	found, err := b.remove(ctx, id)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	b.log.Info("job deleted", "job", id)
	return nil
}

// remove deletes whatever of job id exists, the record last so that the id
// stays taken until the rest is gone, and says whether anything did.
func (b *Broker) remove(ctx context.Context, id string) (found bool, err error) {
	kv, err := b.jobsBucket(ctx)
	if err != nil {
		return false, err
	}
	_, err = kv.Get(ctx, id)
	recorded := err == nil
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, fmt.Errorf("looking up job %s: %w", id, err)
	}
	found = recorded
	switch err := b.js.DeleteConsumer(ctx, wire.TaskStream, wire.DispatchConsumer(id)); {
	case err == nil:
		found = true
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return found, fmt.Errorf("job %s: deleting consumer %s: %w", id, wire.DispatchConsumer(id), err)
	}
	tasks, err := b.js.Stream(ctx, wire.TaskStream)
	if err != nil {
		return found, fmt.Errorf("job %s: opening stream %s: %w", id, wire.TaskStream, err)
	}
	if err := tasks.Purge(ctx, jetstream.WithPurgeSubject(wire.TaskSubject(id))); err != nil {
		return found, fmt.Errorf("job %s: purging tasks: %w", id, err)
	}
	switch err := b.js.DeleteStream(ctx, wire.OutputStream(id)); {
	case err == nil:
		found = true
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return found, fmt.Errorf("job %s: deleting output stream %s: %w", id, wire.OutputStream(id), err)
	}
	if recorded {
		if err := kv.Purge(ctx, id); err != nil {
			return found, fmt.Errorf("job %s: deleting record: %w", id, err)
		}
	}
	return found, nil
}
