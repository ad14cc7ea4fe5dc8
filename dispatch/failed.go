package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// recordFailed adds task to the job's record of shard tasks given up
// (wire.ShardsFailedKey), before the task is settled. The ShardResult
// that also says so is a core NATS message, lost when no controller owns
// the job at that moment (a takeover: the dead owner's plan still leads
// agents to its replicas); the owner that finishes the job reads this
// record. Compare-and-set: the job's agents share it.
func (d *Dispatcher) recordFailed(ctx context.Context, task wire.ShardTask, reason string) error {
	key := wire.ShardsFailedKey(d.id)
	for attempt := 0; ; attempt++ {
		var rec wire.ShardsFailed
		var rev uint64
		e, err := d.readers.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("reading %s: %w", key, err)
		default:
			rev = e.Revision()
			if json.Unmarshal(e.Value(), &rec) != nil || !rec.Submitted.Equal(d.submitted) {
				rec = wire.ShardsFailed{} // an earlier submission's, or unreadable: start again
			}
		}
		rec.Submitted = d.submitted
		rec.Add(wire.FailedSample{Key: task.Key, Epoch: task.Epoch, Reason: reason})
		data, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", key, err)
		}
		if rev == 0 {
			_, err = d.readers.Create(ctx, key, data)
		} else {
			_, err = d.readers.Update(ctx, key, data, rev)
		}
		if err == nil {
			return nil
		}
		if !streams.IsCASConflict(err) || attempt >= 16 {
			return fmt.Errorf("writing %s: %w", key, err)
		}
		// Another agent wrote it meanwhile: read it again.
	}
}
