package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// orderTarget records the order of sends, and the replay nonce of each.
type orderTarget struct {
	mu    sync.Mutex
	sends []wire.ShardTask
}

func (o *orderTarget) Send(ctx context.Context, task wire.ShardTask) (wire.ShardResult, error) {
	o.mu.Lock()
	o.sends = append(o.sends, task)
	o.mu.Unlock()
	return wire.ShardResult{Task: task.ID(), Samples: 2, Chunks: 1, Bytes: 100}, nil
}

func (o *orderTarget) replays() []wire.ShardTask {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []wire.ShardTask
	for _, t := range o.sends {
		if t.Replay != "" {
			out = append(out, t)
		}
	}
	return out
}

// A replay queued while the job's epochs are still queued is sent before
// them, and one queued after every task settled is served by ServeReplays;
// neither counts as one of the job's tasks.
func TestReplayGoesFirstAndIsServedAfterTheJobSettled(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	job := e.submit(t, testSpec("rp", 3))
	if n, err := Replay(ctx, e.js, job, "trainer", map[int][]int{1: {2, 3}}); err != nil || n != 2 {
		t.Fatalf("Replay: %d, %v; want 2 queued", n, err)
	}
	if taskCount(t, e.js, "rp") != 12 {
		t.Fatalf("replays landed among the job's queued tasks")
	}
	tgt := &orderTarget{}
	d, err := NewDispatcher(ctx, e.js, job, tgt, DispatcherOptions{Replicas: capacity(1)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(t, runAsync(ctx, d)); err != nil {
		t.Fatal(err)
	}
	tgt.mu.Lock()
	first := tgt.sends[:2]
	tgt.mu.Unlock()
	for i, task := range first {
		if task.Replay == "" || task.Epoch != 1 || task.Shard != 2+i {
			t.Errorf("send %d: %s replay %q; want the replays of e1 s2, s3 first", i, task.ID(), task.Replay)
		}
	}
	st := d.Stats()
	if st.Done != 12 || st.Replays != 2 || st.ReplayPending != 0 {
		t.Errorf("stats: done %d replays %d pending %d; want 12, 2, 0", st.Done, st.Replays, st.ReplayPending)
	}

	// After the job settled: ServeReplays takes a new one; Backlog says
	// there is work again until it is done.
	sctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- d.ServeReplays(sctx) }()
	if _, err := Replay(ctx, e.js, job, "trainer", map[int][]int{2: {0}}); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if got := len(tgt.replays()); got != 3 {
			return fmt.Errorf("replays sent: %d, want 3", got)
		}
		if _, _, done := d.Backlog(); !done {
			return fmt.Errorf("backlog not done after the replay")
		}
		return nil
	})
	stop()
	if err := <-errc; err != context.Canceled {
		t.Errorf("ServeReplays: %v, want context.Canceled", err)
	}
	if r := tgt.replays(); r[2].Epoch != 2 || r[2].Shard != 0 || r[2].Replay == r[0].Replay {
		t.Errorf("third replay %s nonce %q (first %q): want e2 s0 with its own nonce", r[2].ID(), r[2].Replay, r[0].Replay)
	}
}

func TestReplayRefusesShardsTheJobLacks(t *testing.T) {
	e := newEnv(t, 2)
	job := e.submit(t, testSpec("rq", 1))
	for _, shards := range []map[int][]int{{1: {0}}, {0: {2}}, {-1: {0}}} {
		if n, err := Replay(context.Background(), e.js, job, "trainer", shards); err == nil || n != 0 {
			t.Errorf("Replay(%v): %d, %v; want an error and nothing queued", shards, n, err)
		}
	}
}
