package streams

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A key-value Get is a direct get: any replica of the bucket's stream
// answers it (the one on the client's own server first) from what it
// holds, so a replica catching up (one back from a partition) answers with
// an earlier entry than the leader has.

// WaitReplicasCurrent waits, up to max, until every replica of kv's
// stream that the leader hears from has every entry the leader
// committed, so that a Get after it sees what was written before. A
// replica the leader has not heard from for peerSilent is cut off from
// it, and so from this client, which reached the leader: it answers no
// read here (NATS takes a silent server for gone only after minutes).
// The error names the replicas still behind, or why the stream's state
// could not be read. A bucket on one server has no replica to wait for.
func WaitReplicasCurrent(ctx context.Context, kv jetstream.KeyValue, max time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	var last error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		st, err := kv.Status(ctx)
		switch {
		case err != nil:
			last = fmt.Errorf("reading bucket %s's replicas: %w", kv.Bucket(), err)
		default:
			last = nil
			if s, ok := st.(*jetstream.KeyValueBucketStatus); ok && s.StreamInfo() != nil {
				last = replicasBehind(kv.Bucket(), s.StreamInfo().Cluster, time.Now())
			}
			if last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(wait):
		}
	}
}

// peerSilent is five of the stream leader's heartbeats (one a second).
const peerSilent = 5 * time.Second

// replicasBehind names the replicas of a stream (c: its cluster, as its
// leader saw it at now) that the leader hears from and that lack
// committed entries, nil if none does. The leader reports a replica it
// has not heard from since its election as active 0 s ago: one it has
// still not heard from peerSilent after it took over is silent (its node
// was lost before the election, often the cause of it).
func replicasBehind(bucket string, c *jetstream.ClusterInfo, now time.Time) error {
	if c == nil {
		return nil
	}
	if c.Leader == "" {
		return fmt.Errorf("bucket %s has no stream leader", bucket)
	}
	var behind []string
	for _, p := range c.Replicas {
		neverHeard := p.Active == 0 && c.LeaderSince != nil && now.Sub(*c.LeaderSince) > peerSilent
		if !p.Offline && !p.Current && p.Active <= peerSilent && !neverHeard {
			behind = append(behind, fmt.Sprintf("%s (%d entries behind)", p.Name, p.Lag))
		}
	}
	if len(behind) > 0 {
		return fmt.Errorf("bucket %s: replicas behind their leader %s: %s", bucket, c.Leader, strings.Join(behind, ", "))
	}
	return nil
}
