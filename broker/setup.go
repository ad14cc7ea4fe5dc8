package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/wire"
)

// taskDuplicateWindow is how long the task stream remembers a task's
// Nats-Msg-Id, covering retried publishes within a Submit.
const taskDuplicateWindow = 10 * time.Minute

// outputDuplicateWindow is how long a job's output stream remembers a
// chunk's Nats-Msg-Id: longer than any redelivery chain of a task.
const outputDuplicateWindow = time.Hour

// outputHeadroom is what an output message may carry beyond ChunkMaxBytes:
// the safetensors header with its sample keys, and a shard end listing
// failed samples.
const outputHeadroom = 1 << 20

// minOutputHeadroom is the least headroom a job is accepted with when the
// server's max payload forces less than outputHeadroom.
const minOutputHeadroom = 64 << 10

// EnsureStreams creates the task stream and the jobs bucket, or updates
// them to this configuration. It is idempotent.
func EnsureStreams(ctx context.Context, js jetstream.JetStream) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        wire.TaskStream,
		Description: "Sluice shard tasks, one per shard per epoch",
		Subjects:    []string{wire.TaskSubjects},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  taskDuplicateWindow,
	})
	if err != nil {
		return fmt.Errorf("creating stream %s: %w", wire.TaskStream, err)
	}
	_, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      wire.JobsBucket,
		Description: "Sluice job records",
		History:     1,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("creating key-value bucket %s: %w", wire.JobsBucket, err)
	}
	return nil
}

// outputStreamConfig is the per-job stream functions publish chunks to.
// maxPayload is the server's limit on one message.
func outputStreamConfig(spec wire.JobSpec, maxPayload int64) (jetstream.StreamConfig, error) {
	size := int64(spec.ChunkMaxBytes) + outputHeadroom
	if size > maxPayload {
		size = maxPayload
	}
	if size < int64(spec.ChunkMaxBytes)+minOutputHeadroom {
		return jetstream.StreamConfig{}, fmt.Errorf("job %s: chunk max bytes %d: the NATS server takes messages up to %d bytes, want at most %d",
			spec.ID, spec.ChunkMaxBytes, maxPayload, maxPayload-minOutputHeadroom)
	}
	return jetstream.StreamConfig{
		Name:        wire.OutputStream(spec.ID),
		Description: "Sluice output chunks of job " + spec.ID,
		Subjects:    []string{wire.OutputSubject(spec.ID)},
		// The trainer agent is the one consumer: a chunk is removed once it
		// acks it, so the stream holds only what the trainer has not taken,
		// capped at OutputBufferBytes (a publish past it fails and the
		// shard is retried later; the dispatcher pauses before that).
		Retention:  jetstream.WorkQueuePolicy,
		MaxBytes:   spec.OutputBufferBytes,
		Discard:    jetstream.DiscardNew,
		Storage:    jetstream.FileStorage,
		Duplicates: outputDuplicateWindow,
		MaxMsgSize: int32(size),
	}, nil
}
