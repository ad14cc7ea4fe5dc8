package dispatch

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errNoReplica means the plan names no endpoint now: the task waits for
// the next plan without counting a failure.
var errNoReplica = errors.New("no function replica in the dispatch plan")

// replicaLoad counts this agent's sends per endpoint for chooseEndpoint
// and wakes the tasks waiting for a busy home when a send finishes.
type replicaLoad struct {
	mu       sync.Mutex
	inflight map[string]int
	rotate   int
	freed    chan struct{} // closed and replaced when a send finishes
}

func newReplicaLoad() *replicaLoad {
	return &replicaLoad{inflight: map[string]int{}, freed: make(chan struct{})}
}

// acquire chooses the endpoint for a send of the shard with rendezvous key
// (waiting for its busy home at most maxWait) and counts the send on it
// until release. endpoints gives the plan's endpoints and concurrency at
// each try, since the plan may change while the task waits.
func (r *replicaLoad) acquire(ctx context.Context, endpoints func() ([]string, int), key, avoid string, maxWait time.Duration) (endpoint string, release func(), err error) {
	start := time.Now()
	for {
		eps, per := endpoints()
		r.mu.Lock()
		waited := time.Since(start)
		ep, wait := chooseEndpoint(choice{Endpoints: eps, PerEndpoint: per, Key: key, InFlight: r.inflight,
			Avoid: avoid, Rotate: r.rotate, Waited: waited, MaxWait: maxWait})
		if ep != "" {
			r.rotate++
			r.inflight[ep]++
			r.mu.Unlock()
			return ep, func() { r.release(ep) }, nil
		}
		freed := r.freed
		r.mu.Unlock()
		if !wait {
			return "", nil, errNoReplica
		}
		timer := time.NewTimer(maxWait - waited)
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

func (r *replicaLoad) release(ep string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight[ep]--; r.inflight[ep] <= 0 {
		delete(r.inflight, ep)
	}
	close(r.freed)
	r.freed = make(chan struct{})
}
