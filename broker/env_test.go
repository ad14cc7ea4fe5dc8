package broker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/jobspec"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// env is a broker over real embedded NATS and S3, with a dataset of shards
// at s3://data/ds/.
type env struct {
	js jetstream.JetStream
	s3 *s3.Client
	b  *Broker
}

func newEnv(t testing.TB, shards int) env {
	t.Helper()
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := testenv.S3(t, "")
	o := synth.ImageOptions{Samples: 2 * shards, Shards: shards, Seed: 1, MinSide: 8, MaxSide: 16, Quality: 50, Classes: 2}
	imgs, err := synth.Images(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(context.Background(), c, "data", "ds/", imgs); err != nil {
		t.Fatal(err)
	}
	return env{js: js, s3: c, b: New(js, c, streams.Options{}, nil).WithSpecCheck(jobspec.Check)}
}

func testSpec(id string, epochs int) wire.JobSpec {
	return wire.JobSpec{ID: id, Dataset: "s3://data/ds/", Pipeline: "imagenet-train", BatchSize: 4, Epochs: epochs, Seed: 11}
}

func (e env) submit(t testing.TB, spec wire.JobSpec) wire.Job {
	t.Helper()
	job, err := e.b.Submit(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// storedTask is a task message still in the task stream.
type storedTask struct {
	task  wire.ShardTask
	msgID string
}

// storedTasks reads job's remaining tasks in stream order.
func storedTasks(t testing.TB, js jetstream.JetStream, job string) []storedTask {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, wire.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedTask
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(wire.TaskSubject(job)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatalf("reading tasks of %s from seq %d: %v", job, seq, err)
		}
		var task wire.ShardTask
		if err := json.Unmarshal(m.Data, &task); err != nil {
			t.Fatalf("task at seq %d: %v", m.Sequence, err)
		}
		out = append(out, storedTask{task: task, msgID: m.Header.Get(jetstream.MsgIDHeader)})
		seq = m.Sequence + 1
	}
}

// taskCount is how many of job's tasks the stream holds.
func taskCount(t testing.TB, js jetstream.JetStream, job string) int {
	t.Helper()
	s, err := js.Stream(context.Background(), wire.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(wire.TaskSubject(job)))
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Subjects[wire.TaskSubject(job)])
}

// putPlan writes a dispatch plan for job id, as its owning controller would.
func putPlan(t testing.TB, e env, id string) {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), wire.DispatchBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(wire.DispatchPlan{Job: id, Endpoints: []string{"http://127.0.0.1:1"}, PerEndpoint: 1, InFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), id, data); err != nil {
		t.Fatal(err)
	}
}

// hasPlan says whether job id has a dispatch plan.
func hasPlan(t testing.TB, e env, id string) bool {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), wire.DispatchBucket)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Get(context.Background(), id)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}
