package broker

import (
	"context"
	"hash/fnv"
	"net/http"
	"slices"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// Locality makes a target send each shard to the replica that read it in
// earlier epochs, where the shard cache holds it: rendezvous (highest
// random weight) hashing of the shard's key over the ready replicas picks
// the shard's home.
type Locality struct {
	// PerReplica is how many tasks one replica takes at once (its
	// concurrency); a replica with that many in flight is busy. Default 1.
	PerReplica int
	// MaxWait bounds how long a task waits for its busy home replica
	// before it goes to the next free replica in its rendezvous order
	// (which then holds the shard too). 0 means no waiting.
	MaxWait time.Duration
}

// DefaultLocalityWait is the controller's default Locality.MaxWait: short
// against a shard's processing (seconds), long against a task's send.
const DefaultLocalityWait = 100 * time.Millisecond

// Rendezvous orders endpoints for a shard key by their rendezvous score,
// highest first: the first is the shard's home, the next its fallback.
// Each endpoint's score depends on it and the key only, so removing an
// endpoint moves just the shards it was home to, and adding one takes
// about 1/(n+1) of the shards, from every other endpoint alike.
func Rendezvous(key string, endpoints []string) []string {
	type scored struct {
		ep    string
		score uint64
	}
	s := make([]scored, len(endpoints))
	for i, ep := range endpoints {
		h := fnv.New64a()
		h.Write([]byte(ep))
		h.Write([]byte{0})
		h.Write([]byte(key))
		s[i] = scored{ep, mix(h.Sum64())}
	}
	slices.SortFunc(s, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return compareStrings(a.ep, b.ep)
	})
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.ep
	}
	return out
}

// mix is splitmix64's finaliser: FNV's low bits vary little between keys
// that differ in one character, and the scores must look random.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// chooseReplica is the locality policy. ranked is the shard's rendezvous
// order over the ready replicas, inflight the tasks each has, waited how
// long this task has waited so far. It returns the replica to send to, or
// wait when the task should wait for its busy home a while longer (until
// a send finishes, at most maxWait-waited). A replica is never left idle
// for longer than maxWait by a task that could run on it: after maxWait
// the task takes the highest-ranked free replica, and when none is free,
// the least loaded (the replica queues it).
func chooseReplica(ranked []string, inflight map[string]int, perReplica int, waited, maxWait time.Duration) (endpoint string, wait bool) {
	if len(ranked) == 0 {
		return "", false
	}
	if inflight[ranked[0]] < perReplica {
		return ranked[0], false
	}
	if waited < maxWait {
		return "", true
	}
	best := ranked[0]
	for _, ep := range ranked {
		if inflight[ep] < perReplica {
			return ep, false
		}
		if inflight[ep] < inflight[best] {
			best = ep
		}
	}
	return best, false
}

// NewLocalityTarget is NewCloudEventsTarget sending each task to its
// shard's home replica (Rendezvous over replicas.Endpoints(job)), waiting
// at most loc.MaxWait for it when it is busy.
func NewLocalityTarget(job string, replicas Replicas, hc *http.Client, loc Locality) Target {
	t := NewCloudEventsTarget(job, replicas, hc).(*cloudEventsTarget)
	if loc.PerReplica <= 0 {
		loc.PerReplica = 1
	}
	t.locality, t.freed = &loc, make(chan struct{})
	return t
}

// pickHome chooses task's endpoint by chooseReplica and counts a send on
// it until release.
func (t *cloudEventsTarget) pickHome(ctx context.Context, task wire.ShardTask) (endpoint string, release func(), err error) {
	start := time.Now()
	key := task.Bucket + "/" + task.Key
	for {
		eps := t.replicas.Endpoints(t.job)
		if len(eps) == 0 {
			return "", nil, ErrNoReplica
		}
		ranked := Rendezvous(key, eps)
		waited := time.Since(start)
		t.mu.Lock()
		ep, wait := chooseReplica(ranked, t.inflight, t.locality.PerReplica, waited, t.locality.MaxWait)
		if !wait {
			t.inflight[ep]++
			t.mu.Unlock()
			return ep, func() {
				t.mu.Lock()
				defer t.mu.Unlock()
				if t.inflight[ep]--; t.inflight[ep] <= 0 {
					delete(t.inflight, ep)
				}
				close(t.freed)
				t.freed = make(chan struct{})
			}, nil
		}
		freed := t.freed
		t.mu.Unlock()
		timer := time.NewTimer(t.locality.MaxWait - waited)
		select {
		case <-freed:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return "", nil, ctx.Err()
		}
		timer.Stop()
	}
}
