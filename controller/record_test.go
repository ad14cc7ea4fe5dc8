package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// putRecord writes a job record straight into the job store, as anyone
// who may write to it can, bypassing Submit's checks.
func (e *env) putRecord(t *testing.T, key string, data []byte) {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), wire.JobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, data); err != nil {
		t.Fatal(err)
	}
}

// validRecord is the record Submit would write for a job of the image
// dataset, without queueing its tasks.
func (e *env) validRecord(t *testing.T, id string) wire.Job {
	t.Helper()
	shards, err := objstore.ListShards(context.Background(), e.s3, "data", "img/")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	return wire.Job{Spec: spec(id, "img", 1).WithDefaults(), Bucket: "data", Shards: shards, Submitted: now, State: wire.JobQueued, Updated: now}
}

// TestInvalidRecordIsFailedNotRun: a record written into the job store
// that Submit would have refused is not run: its owner marks it failed
// with a reason that names what is wrong, and starts no replica.
func TestInvalidRecordIsFailedNotRun(t *testing.T) {
	e := newEnv(t, 2)
	e.startController(t, "c1", Options{})
	cases := map[string]struct {
		change func(*wire.Job)
		want   string
	}{
		"epochs":   {func(j *wire.Job) { j.Spec.Epochs = 20000 }, "epochs: 20000: want 1..10000"},
		"readers":  {func(j *wire.Job) { j.Spec.Readers = manyReaders(1000) }, "readers: 1000 readers: want at most 64"},
		"outside":  {func(j *wire.Job) { j.Shards = []string{"secrets/key.pem"} }, `shards[0] "secrets/key.pem": want a shard object`},
		"unsorted": {func(j *wire.Job) { j.Shards[0], j.Shards[1] = j.Shards[1], j.Shards[0] }, "want the keys sorted, each once"},
		"bucket":   {func(j *wire.Job) { j.Bucket = "other" }, `bucket "other" is not the dataset's ("data")`},
		"id":       {func(j *wire.Job) { j.Spec.ID = "someone-else" }, `id "someone-else" under key "id"`},
		"state":    {func(j *wire.Job) { j.State = "paused" }, `state "paused" is not a job state`},
	}
	for name, c := range cases {
		job := e.validRecord(t, name)
		c.change(&job)
		data, _ := json.Marshal(job)
		e.putRecord(t, name, data)
	}
	for name, c := range cases {
		testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			job, err := e.b.Job(context.Background(), name)
			if err != nil {
				return err
			}
			if job.State != wire.JobFailed || !strings.Contains(job.Reason, c.want) {
				return fmt.Errorf("%s: job is %s (%q), want failed naming %q", name, job.State, job.Reason, c.want)
			}
			return nil
		})
		if s, err := e.status(name); err != nil || s.State != wire.JobFailed || !strings.Contains(s.Reason, c.want) {
			t.Errorf("%s: status %s %q (%v), want failed naming %q", name, s.State, s.Reason, err, c.want)
		}
		e.pool.mu.Lock()
		n := e.pool.maxJob[name]
		e.pool.mu.Unlock()
		if n != 0 {
			t.Errorf("%s: the job had %d replicas, want none", name, n)
		}
	}
	if n := counter(t, e, "sluice_controller_invalid_job_records_total", "", ""); n < float64(len(cases)) {
		t.Errorf("%v invalid records counted, want at least %d", n, len(cases))
	}
}

// TestUndecodableRecordIsNotRun: a record that is not JSON is counted and
// left alone; the controller runs on.
func TestUndecodableRecordIsNotRun(t *testing.T) {
	e := newEnv(t, 2)
	e.gate.release()
	e.startController(t, "c1", Options{})
	e.putRecord(t, "garbage", []byte("{not json"))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := counter(t, e, "sluice_controller_invalid_job_records_total", "", ""); n != 1 {
			return fmt.Errorf("%v invalid records counted, want 1", n)
		}
		return nil
	})
	job := e.submit(t, spec("fine", "img", 1))
	e.startAgent(t, job, "node-a")
	e.waitState(t, "fine", wire.JobSucceeded, 20*time.Second)
	if l, err := e.lease("garbage"); err != nil || l != nil {
		t.Errorf("lease of the undecodable record's job: %+v (%v), want none", l, err)
	}
}

// TestRecordTurnedInvalidStopsTheJob: a running job whose record is
// overwritten with one that is not valid stops, and is marked failed
// with the reason; its replicas go.
func TestRecordTurnedInvalidStopsTheJob(t *testing.T) {
	e := newEnv(t, 2)
	e.startController(t, "c1", Options{})
	e.submit(t, spec("turned", "img", 1))
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := e.pool.replicas("turned"); n == 0 {
			return fmt.Errorf("no replica yet")
		}
		return nil
	})
	rec, err := e.b.Job(context.Background(), "turned")
	if err != nil {
		t.Fatal(err)
	}
	rec.Spec.Readers = manyReaders(100)
	data, _ := json.Marshal(rec)
	e.putRecord(t, "turned", data)
	testenv.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		got, err := e.b.Job(context.Background(), "turned")
		if err != nil {
			return err
		}
		if got.State != wire.JobFailed || !strings.Contains(got.Reason, "100 readers: want at most 64") {
			return fmt.Errorf("job is %s (%q), want failed naming the readers", got.State, got.Reason)
		}
		return nil
	})
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := e.pool.replicas("turned"); n != 0 {
			return fmt.Errorf("%d replicas, want 0", n)
		}
		return nil
	})
}

func manyReaders(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r%d", i)
	}
	return out
}
