package itest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// DescribeJob says where a job stands in JetStream, for a failure message:
// its record, its tasks, its dispatch consumer, its output stream and each
// reader consumer's pending and unacked chunks.
func DescribeJob(js jetstream.JetStream, job string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if j, err := Job(ctx, js, job); err != nil {
		fmt.Fprintf(&b, "record: %v\n", err)
	} else {
		fmt.Fprintf(&b, "record: state=%s reason=%q shards=%d epochs=%d readers=%v\n", j.State, j.Reason, len(j.Shards), j.Spec.Epochs, j.Spec.Readers)
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
	out, err := js.Stream(ctx, wire.OutputStream(job))
	if err != nil {
		fmt.Fprintf(&b, "output stream: %v\n", err)
		return b.String()
	}
	si := out.CachedInfo()
	fmt.Fprintf(&b, "output stream: msgs=%d bytes=%d first=%d last=%d consumers=%d\n", si.State.Msgs, si.State.Bytes, si.State.FirstSeq, si.State.LastSeq, si.State.Consumers)
	names := out.ConsumerNames(ctx)
	for n := range names.Name() {
		if c, err := out.Consumer(ctx, n); err == nil {
			describeConsumer(&b, c.CachedInfo())
		}
	}
	return b.String()
}

func describeConsumer(b *strings.Builder, ci *jetstream.ConsumerInfo) {
	fmt.Fprintf(b, "consumer %s: pending=%d ack_pending=%d redelivered=%d waiting=%d delivered_seq=%d ack_floor_seq=%d\n",
		ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered.Stream, ci.AckFloor.Stream)
}
