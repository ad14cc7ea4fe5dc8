package dispatch

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/sluice-project/sluice/wire"
)

// Produce sends task once more, outside the queue and the sink, for an
// agent that needs rows of a shard whose bytes it does not hold (its
// reader's team gave them to its ranks, or it restarted): chunk gets the
// chunks as they arrive (every send starts at chunk 0, so after a retry
// the same chunks come again). It goes to the endpoints of the job's plan
// as the dispatcher's own sends do, is retried with backoff until the
// shard ends, and fails on a permanent refusal, after MaxDeliver failed
// sends, or when ctx ends. Nothing is acked or published: the shard's
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
	key := shardKey(task.Bucket, task.Key)
	avoid := ""
	failures := 0
	for {
		ep, release, err := d.replica(ctx, key, avoid)
		if err != nil {
			return wire.ShardEnd{}, fmt.Errorf("producing %s: %w", task.ID(), err)
		}
		end, err := sendShard(ctx, d.hc, d.opts.Token, ep, task, d.opts.StallTimeout, func(i int, data []byte) error {
			chunk(i, data)
			return nil
		}, nil)
		release()
		switch {
		case err == nil:
			d.m.sends.WithLabelValues(d.id, "ok").Inc()
			return end, nil
		case ctx.Err() != nil:
			return wire.ShardEnd{}, fmt.Errorf("producing %s: %w", task.ID(), ctx.Err())
		}
		kind := kindOf(err)
		d.m.sends.WithLabelValues(d.id, kind.outcome()).Inc()
		failures++
		if kind == failPermanent || failures >= d.opts.MaxDeliver {
			return wire.ShardEnd{}, fmt.Errorf("producing %s: %w", task.ID(), err)
		}
		avoid = ep
		if !sleep(ctx, RetryDelay(failures, rand.Float64())) {
			return wire.ShardEnd{}, fmt.Errorf("producing %s: %w", task.ID(), ctx.Err())
		}
	}
}
