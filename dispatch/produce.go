package dispatch

import (
	"context"
	"fmt"

	"github.com/sluice-project/sluice/wire"
)

// Produce sends task once more, outside the queue and the sink, for an
// agent that needs rows of a shard whose bytes it does not hold (its
// reader's team gave them to its ranks, or it restarted): chunk gets the
// chunks as they arrive (every send starts at chunk 0, so after a retry
// the same chunks come again). It is sent by the dispatcher's one send
// loop (sendUntilDone), as a task from the queue is: a busy replica pool
// (429, 503) is waited out, and it fails on a permanent refusal, after
// MaxDeliver failed sends that were the task's, or when ctx ends. Nothing is acked or published: the shard's
// task is settled as its queue delivery is. Stats counts it (Producing),
// so that the agent's demand keeps or brings back a replica for it after
// the job's queue has drained.
func (d *Dispatcher) Produce(ctx context.Context, task wire.ShardTask, chunk func(index int, data []byte)) (wire.ShardEnd, error) {
	if err := d.checkTask(task); err != nil {
		return wire.ShardEnd{}, fmt.Errorf("producing %s: %w", task.ID(), err)
	}
	d.mu.Lock()
	d.producing++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.producing--
		d.mu.Unlock()
	}()
	end, err := d.sendUntilDone(ctx, task, func(i int, data []byte) error { chunk(i, data); return nil }, sendHooks{})
	if err != nil {
		return wire.ShardEnd{}, fmt.Errorf("producing %s: %w", task.ID(), err)
	}
	return end, nil
}
