package broker

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

func TestChooseReplica(t *testing.T) {
	ranked := []string{"home", "second", "third"}
	const maxWait = 100 * time.Millisecond
	tests := []struct {
		name     string
		inflight map[string]int
		waited   time.Duration
		want     string
		wantWait bool
	}{
		{name: "home free", inflight: map[string]int{"second": 0}, want: "home"},
		{name: "home busy: wait", inflight: map[string]int{"home": 1}, waited: 0, wantWait: true},
		{name: "home busy, still within the bound", inflight: map[string]int{"home": 1}, waited: maxWait - time.Millisecond, wantWait: true},
		{name: "bound reached: the next free in rendezvous order", inflight: map[string]int{"home": 1}, waited: maxWait, want: "second"},
		{name: "bound passed, second busy too", inflight: map[string]int{"home": 1, "second": 1}, waited: 5 * maxWait, want: "third"},
		{name: "all busy: the least loaded, ties to rank", inflight: map[string]int{"home": 2, "second": 1, "third": 1}, waited: maxWait, want: "second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, wait := chooseReplica(ranked, tt.inflight, 1, tt.waited, maxWait)
			if got != tt.want || wait != tt.wantWait {
				t.Errorf("chooseReplica = %q, wait %v; want %q, wait %v", got, wait, tt.want, tt.wantWait)
			}
		})
	}
	if got, wait := chooseReplica(ranked, map[string]int{"home": 1}, 2, 0, maxWait); got != "home" || wait {
		t.Errorf("a replica of concurrency 2 with 1 in flight: %q, wait %v; want home", got, wait)
	}
	if got, wait := chooseReplica(ranked, map[string]int{"home": 1}, 1, 0, 0); got != "second" || wait {
		t.Errorf("no waiting allowed: %q, wait %v; want second at once", got, wait)
	}
}

// TestRendezvousMovesFewShards: scaling 5 replicas to 6 moves about a sixth
// of the shards, all to the new replica; scaling to 4 moves only the
// removed replica's shards; the homes spread evenly.
func TestRendezvousMovesFewShards(t *testing.T) {
	eps := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("http://127.0.0.1:%d", 40000+i))
		}
		return out
	}
	const shards = 6000
	home := func(eps []string) map[string]string {
		m := map[string]string{}
		for i := range shards {
			key := fmt.Sprintf("data/train/shard-%06d.tar", i)
			m[key] = Rendezvous(key, eps)[0]
		}
		return m
	}
	five := home(eps(5))
	perReplica := map[string]int{}
	for _, ep := range five {
		perReplica[ep]++
	}
	for ep, n := range perReplica {
		if n < shards/5*8/10 || n > shards/5*12/10 {
			t.Errorf("%s is home to %d shards, want about %d", ep, n, shards/5)
		}
	}
	six, newEP := home(eps(6)), eps(6)[5]
	moved := 0
	for k, ep := range six {
		if ep != five[k] {
			moved++
			if ep != newEP {
				t.Errorf("scale up moved %s from %s to %s, not to the new replica", k, five[k], ep)
			}
		}
	}
	if moved < shards/6*8/10 || moved > shards/6*12/10 {
		t.Errorf("scale up moved %d shards, want about %d", moved, shards/6)
	}
	removed := eps(5)[2]
	four := home(append(eps(2), eps(5)[3:]...))
	for k, ep := range four {
		if five[k] != removed && ep != five[k] {
			t.Errorf("scale down moved %s from %s, which stayed", k, five[k])
		}
	}
}

// TestLocalityHoldsATaskAtMostItsBound: real replicas on loopback. A
// shard's task goes to its home; while the home is busy, the next task of
// that shard waits for it no longer than the bound, then runs elsewhere;
// once the home is free it goes home at once.
func TestLocalityHoldsATaskAtMostItsBound(t *testing.T) {
	release := make(chan struct{})
	slow := func(wire.ShardTask) (int, string) { <-release; return http.StatusOK, "" }
	a, b := newFnServer(t, slow), newFnServer(t, nil)
	const bound = 300 * time.Millisecond
	target := NewLocalityTarget("jt", StaticEndpoints{a.URL, b.URL}, nil, Locality{PerReplica: 1, MaxWait: bound})

	// A shard whose home is a.
	var task wire.ShardTask
	for i := range 100 {
		task = testTask(i)
		if Rendezvous(task.Bucket+"/"+task.Key, []string{a.URL, b.URL})[0] == a.URL {
			break
		}
	}
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { _, err := target.Send(ctx, task); first <- err }()
	waitFor(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.tasks) == 1 })

	start := time.Now()
	if _, err := target.Send(ctx, task); err != nil {
		t.Fatal(err)
	}
	held := time.Since(start)
	if held < bound || held > bound+200*time.Millisecond {
		t.Errorf("the task was held %v for its busy home, want the bound %v", held, bound)
	}
	b.mu.Lock()
	n := len(b.tasks)
	b.mu.Unlock()
	if n != 1 {
		t.Errorf("the other replica got %d tasks, want 1 (the one that waited)", n)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := target.Send(ctx, task); err != nil {
		t.Fatal(err)
	}
	if held := time.Since(start); held > bound/2 {
		t.Errorf("a task for a free home took %v", held)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.tasks) != 2 {
		t.Errorf("home got %d tasks, want 2", len(a.tasks))
	}
}

// TestLocalityWaitEndsWhenHomeFrees: a task waiting for its home goes
// there as soon as the home's send finishes, before the bound.
func TestLocalityWaitEndsWhenHomeFrees(t *testing.T) {
	release := make(chan struct{})
	slow := func(wire.ShardTask) (int, string) { <-release; return http.StatusOK, "" }
	a, b := newFnServer(t, slow), newFnServer(t, nil)
	target := NewLocalityTarget("jt", StaticEndpoints{a.URL, b.URL}, nil, Locality{MaxWait: 10 * time.Second})
	var task wire.ShardTask
	for i := range 100 {
		task = testTask(i)
		if Rendezvous(task.Bucket+"/"+task.Key, []string{a.URL, b.URL})[0] == a.URL {
			break
		}
	}
	ctx := context.Background()
	go func() { _, _ = target.Send(ctx, task) }()
	waitFor(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.tasks) == 1 })
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
	start := time.Now()
	if _, err := target.Send(ctx, task); err != nil {
		t.Fatal(err)
	}
	if held := time.Since(start); held > 2*time.Second {
		t.Errorf("held %v after the home freed at 100ms", held)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.tasks) != 0 {
		t.Errorf("the other replica got %d tasks, want none", len(b.tasks))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if !cond() {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}
