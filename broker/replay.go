package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// Replay queues tasks that produce again the given shards of job (epoch ->
// shard indices) for reader, and returns how many it queued. A trainer
// resumed from a checkpoint needs the samples it was handed after that
// checkpoint once more, and their chunks were acked and may be gone from
// the output stream; functions are deterministic, so the shards' chunks
// come again byte for byte. The tasks go to wire.ReplaySubject(job), which
// the job's dispatcher takes before its queued epochs, and carry a replay
// nonce (wire.ShardTask.Replay) so that the output stream does not drop
// their chunks as duplicates. Their chunks go to the reader's own subject
// (wire.ReaderReplaySubject): only that reader's consumer sees them, so a
// replay for one trial of a sweep is neither read again by the others nor
// kept in the stream for a reader that already finished. The job's
// output stream must have been created by a Sluice that knows that
// subject (streams.Output).
//
// Replay returns once every task is stored; a Replay that fails part-way
// can be called again (the extra copies are dropped by the reader).
func Replay(ctx context.Context, js jetstream.JetStream, job wire.Job, reader string, shards map[int][]int) (int, error) {
	id := job.Spec.ID
	if err := wire.ValidateJobID(id); err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	}
	if err := wire.ValidateReader(reader); err != nil {
		return 0, fmt.Errorf("replay of job %s: %w", id, err)
	}
	nonce := reader + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var tasks []wire.ShardTask
	for _, epoch := range slices.Sorted(maps.Keys(shards)) {
		if epoch < 0 || epoch >= job.Spec.Epochs {
			return 0, fmt.Errorf("job %s: replay of epoch %d: the job has epochs 0..%d", id, epoch, job.Spec.Epochs-1)
		}
		for _, shard := range shards[epoch] {
			if shard < 0 || shard >= len(job.Shards) {
				return 0, fmt.Errorf("job %s: replay of shard %d: the job has shards 0..%d", id, shard, len(job.Shards)-1)
			}
			task := shardTask(job, epoch, shard)
			task.OutputSubject = wire.ReaderReplaySubject(id, reader)
			task.Replay = nonce
			tasks = append(tasks, task)
		}
	}
	for i, task := range tasks {
		data, err := json.Marshal(task)
		if err != nil {
			return i, fmt.Errorf("job %s: encoding replay task %s: %w", id, task.ID(), err)
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: wire.ReplaySubject(id), Data: data},
			jetstream.WithMsgID(task.ID()+"@"+nonce), jetstream.WithExpectStream(wire.TaskStream)); err != nil {
			return i, fmt.Errorf("job %s: queueing replay task %s: %w", id, task.ID(), err)
		}
	}
	return len(tasks), nil
}
