package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestChooseEndpoint(t *testing.T) {
	const maxWait = 100 * time.Millisecond
	eps := []string{"http://a", "http://b", "http://c"}
	const key = "data/ds/shard-000001.tar"
	ranked := Rendezvous(key, eps)
	home, second, third := ranked[0], ranked[1], ranked[2]
	tests := []struct {
		name     string
		c        choice
		want     string
		wantWait bool
	}{
		{name: "no endpoints", c: choice{PerEndpoint: 1, Key: key}, want: ""},
		{name: "home free", c: choice{Endpoints: eps, PerEndpoint: 1, Key: key, InFlight: map[string]int{second: 1}}, want: home},
		{name: "home busy: wait", c: choice{Endpoints: eps, PerEndpoint: 1, Key: key, InFlight: map[string]int{home: 1}, MaxWait: maxWait},
			wantWait: true},
		{name: "home busy, within the bound", c: choice{Endpoints: eps, PerEndpoint: 1, Key: key, InFlight: map[string]int{home: 1},
			Waited: maxWait - 1, MaxWait: maxWait}, wantWait: true},
		{name: "bound reached: the next free in rendezvous order", c: choice{Endpoints: eps, PerEndpoint: 1, Key: key,
			InFlight: map[string]int{home: 1}, Waited: maxWait, MaxWait: maxWait}, want: second},
		{name: "second busy too", c: choice{Endpoints: eps, PerEndpoint: 1, Key: key,
			InFlight: map[string]int{home: 1, second: 1}, Waited: 5 * maxWait, MaxWait: maxWait}, want: third},
		{name: "all busy: the least loaded, ties to rank", c: choice{Endpoints: eps, PerEndpoint: 1, Key: key,
			InFlight: map[string]int{home: 2, second: 1, third: 1}, Waited: maxWait, MaxWait: maxWait}, want: second},
		{name: "concurrency 2, one in flight", c: choice{Endpoints: eps, PerEndpoint: 2, Key: key,
			InFlight: map[string]int{home: 1}, MaxWait: maxWait}, want: home},
		{name: "no waiting allowed", c: choice{Endpoints: eps, PerEndpoint: 1, Key: key, InFlight: map[string]int{home: 1}},
			want: second},
		{name: "avoid the home the last send failed on", c: choice{Endpoints: eps, PerEndpoint: 1, Key: key, Avoid: home,
			MaxWait: maxWait}, want: second},
		{name: "avoid the only endpoint: it still is the one", c: choice{Endpoints: eps[:1], PerEndpoint: 1, Key: key,
			Avoid: eps[0]}, want: eps[0]},
		{name: "service: least loaded", c: choice{Endpoints: eps, InFlight: map[string]int{"http://a": 3, "http://b": 1, "http://c": 2}},
			want: "http://b"},
		{name: "service: ties rotate", c: choice{Endpoints: eps, Rotate: 4}, want: "http://b"},
		{name: "service: avoid", c: choice{Endpoints: eps, Avoid: "http://a"}, want: "http://b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, wait := chooseEndpoint(tt.c)
			if got != tt.want || wait != tt.wantWait {
				t.Errorf("chooseEndpoint = %q, wait %v; want %q, wait %v", got, wait, tt.want, tt.wantWait)
			}
		})
	}
	if len(eps) != 3 || eps[0] != "http://a" {
		t.Errorf("chooseEndpoint changed its input: %v", eps)
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
			key := shardKey("data", fmt.Sprintf("train/shard-%06d.tar", i))
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

// TestReplicaLoadWaitsForTheHome: a task whose home is busy gets it as
// soon as the home's send is released, and with no endpoints gets
// errNoReplica.
func TestReplicaLoadWaitsForTheHome(t *testing.T) {
	r := newReplicaLoad()
	eps := []string{"http://a", "http://b"}
	plan := func() ([]string, int) { return eps, 1 }
	key := "data/k"
	home := Rendezvous(key, eps)[0]
	ep, release, err := r.acquire(context.Background(), plan, key, "", time.Hour)
	if err != nil || ep != home {
		t.Fatalf("first send: %q, %v; want the home %s", ep, err, home)
	}
	got := make(chan string)
	go func() {
		ep, rel, err := r.acquire(context.Background(), plan, key, "", time.Hour)
		if err != nil {
			t.Error(err)
		} else {
			rel()
		}
		got <- ep
	}()
	release()
	if ep := <-got; ep != home {
		t.Errorf("the waiting task went to %s, want its home %s once free", ep, home)
	}
	if _, _, err := r.acquire(context.Background(), func() ([]string, int) { return nil, 1 }, key, "", time.Hour); err != errNoReplica {
		t.Errorf("no endpoints: %v, want errNoReplica", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, rel, _ := r.acquire(ctx, plan, key, "", time.Hour)
	cancel()
	if _, _, err := r.acquire(ctx, plan, key, "", time.Hour); err != context.Canceled {
		t.Errorf("waiting with ctx ended: %v", err)
	}
	rel()
}
