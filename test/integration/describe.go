package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// DescribeJob says where a job stands in JetStream, for a failure message:
// its record, its tasks, its dispatch consumer (the queue its agents
// share), its dispatch plan, and each declared reader's recorded position
// and done mark. (No output passes through JetStream: what the agents
// hold is in their logs and /v1/stats.)
func DescribeJob(js jetstream.JetStream, job string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	readers := []string{wire.DefaultReader}
	if j, err := Job(ctx, js, job); err != nil {
		fmt.Fprintf(&b, "record: %v\n", err)
	} else {
		fmt.Fprintf(&b, "record: state=%s reason=%q shards=%d epochs=%d readers=%v\n", j.State, j.Reason, len(j.Shards), j.Spec.Epochs, j.Spec.Readers)
		if len(j.Spec.Readers) > 0 {
			readers = j.Spec.Readers
		}
	}
	if s, err := js.Stream(ctx, wire.TaskStream); err == nil {
		if info, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.TaskSubject(job))); err == nil {
			fmt.Fprintf(&b, "tasks queued: %d\n", info.State.Subjects[wire.TaskSubject(job)])
		}
		if c, err := s.Consumer(ctx, wire.DispatchConsumer(job)); err == nil {
			describeConsumer(&b, c.CachedInfo())
		} else {
			fmt.Fprintf(&b, "dispatch consumer: %v\n", err)
		}
	}
	if kv, err := js.KeyValue(ctx, wire.DispatchBucket); err != nil {
		fmt.Fprintf(&b, "dispatch plan: %v\n", err)
	} else if e, err := kv.Get(ctx, job); err != nil {
		fmt.Fprintf(&b, "dispatch plan: %v\n", err)
	} else {
		var p wire.DispatchPlan
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			fmt.Fprintf(&b, "dispatch plan: %v: %q\n", err, e.Value())
		} else {
			fmt.Fprintf(&b, "dispatch plan: revision=%d endpoints=%v per_endpoint=%d in_flight=%d shares=%v time=%s\n",
				e.Revision(), p.Endpoints, p.PerEndpoint, p.InFlight, p.Shares, p.Time.Format(time.RFC3339Nano))
		}
	}
	if kv, err := js.KeyValue(ctx, wire.ReadersBucket); err != nil {
		fmt.Fprintf(&b, "readers: %v\n", err)
	} else {
		for _, r := range readers {
			pos := "none"
			if e, err := kv.Get(ctx, wire.ReaderKey(job, r)); err == nil {
				v := string(e.Value())
				if len(v) > 300 {
					v = v[:300] + "..."
				}
				pos = fmt.Sprintf("%d bytes, revision %d: %s", len(e.Value()), e.Revision(), v)
			}
			_, derr := kv.Get(ctx, wire.ReaderDoneKey(job, r))
			fmt.Fprintf(&b, "reader %s: done=%t position: %s\n", r, derr == nil, pos)
		}
	}
	return b.String()
}

func describeConsumer(b *strings.Builder, ci *jetstream.ConsumerInfo) {
	fmt.Fprintf(b, "consumer %s: pending=%d ack_pending=%d redelivered=%d waiting=%d delivered_seq=%d ack_floor_seq=%d ack_wait=%v\n",
		ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream, ci.Config.AckWait)
}
