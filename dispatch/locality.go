package dispatch

import (
	"hash/fnv"
	"slices"
	"strings"
	"time"
)

// Rendezvous orders endpoints for a shard key by their rendezvous (highest
// random weight) score, highest first: the first is the shard's home, the
// next its fallback. Each endpoint's score depends on it and the key only,
// so removing an endpoint moves just the shards it was home to, and adding
// one takes about 1/(n+1) of the shards, from every other endpoint alike.
// Every agent of a job computes the same homes, so a shard's bytes stay in
// one replica's shard cache whichever agent sends it.
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
		return strings.Compare(a.ep, b.ep)
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

// shardKey is what a shard's home is hashed from.
func shardKey(bucket, key string) string { return bucket + "/" + key }

// choice is the input of chooseEndpoint: everything the replica policy
// looks at, so that it is a pure function.
type choice struct {
	// Endpoints and PerEndpoint are the plan's.
	Endpoints   []string
	PerEndpoint int
	// Key is the shard's rendezvous key.
	Key string
	// InFlight is this agent's sends per endpoint.
	InFlight map[string]int
	// Avoid is the endpoint the task's last send failed on: tried last,
	// since it may be dying (or busy with other agents' sends).
	Avoid string
	// Rotate breaks ties among equally loaded endpoints of a Service.
	Rotate int
	// Waited is how long the task has waited for its home; MaxWait bounds it.
	Waited, MaxWait time.Duration
}

// chooseEndpoint is the replica policy. With PerEndpoint > 0 (replicas
// the agent sees one by one) a task goes to its shard's home, the first
// in rendezvous order, where the shard cache holds it; while the home has
// PerEndpoint sends in flight the task waits (wait true: until a send
// finishes, at most MaxWait-Waited), then takes the highest-ranked free
// endpoint, and when none is free the least loaded (the replica queues
// it). With PerEndpoint 0 (a Knative Service URL, whose activator
// balances) it takes the least loaded endpoint. An empty endpoint means
// there is none.
func chooseEndpoint(c choice) (endpoint string, wait bool) {
	eps := c.Endpoints
	if c.Avoid != "" && len(eps) > 1 && slices.Contains(eps, c.Avoid) {
		eps = slices.DeleteFunc(slices.Clone(eps), func(ep string) bool { return ep == c.Avoid })
	}
	if len(eps) == 0 {
		return "", false
	}
	if c.PerEndpoint <= 0 {
		return leastLoaded(eps, c.InFlight, c.Rotate), false
	}
	return chooseHome(Rendezvous(c.Key, eps), c.InFlight, c.PerEndpoint, c.Waited, c.MaxWait)
}

// chooseHome picks among ranked, a shard's rendezvous order. A replica is
// never left idle for longer than maxWait by a task that could run on it.
func chooseHome(ranked []string, inflight map[string]int, perEndpoint int, waited, maxWait time.Duration) (endpoint string, wait bool) {
	if inflight[ranked[0]] < perEndpoint {
		return ranked[0], false
	}
	if waited < maxWait {
		return "", true
	}
	best := ranked[0]
	for _, ep := range ranked {
		if inflight[ep] < perEndpoint {
			return ep, false
		}
		if inflight[ep] < inflight[best] {
			best = ep
		}
	}
	return best, false
}

// leastLoaded is the endpoint with the fewest sends in flight; ties go to
// the first from rotate on, so that equal endpoints take turns.
func leastLoaded(eps []string, inflight map[string]int, rotate int) string {
	start := rotate % len(eps)
	if start < 0 {
		start += len(eps)
	}
	best := eps[start]
	for i := 1; i < len(eps); i++ {
		if ep := eps[(start+i)%len(eps)]; inflight[ep] < inflight[best] {
			best = ep
		}
	}
	return best
}
