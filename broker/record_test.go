package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// TestCheckRecord: the record Submit stores passes, as do its states over
// its life; each change Submit would not have made is named.
func TestCheckRecord(t *testing.T) {
	e := newEnv(t, 3)
	e.submit(t, testSpec("ok", 2))
	good, err := e.b.Job(context.Background(), "ok")
	if err != nil {
		t.Fatal(err)
	}
	for _, state := range []wire.JobState{wire.JobQueued, wire.JobRunning, wire.JobSucceeded, wire.JobFailed, wire.JobCancelled} {
		j := good
		j.State = state
		if err := CheckRecord("ok", j); err != nil {
			t.Errorf("Submit's record, %s: %v", state, err)
		}
	}
	for want, change := range map[string]func(*wire.Job){
		`id "ok" under key "other"`:                  func(*wire.Job) {},
		"batch_size: 0: want 1..65536":               func(j *wire.Job) { j.Spec.BatchSize = 0 },
		"readers: 65 readers: want at most 64":       func(j *wire.Job) { j.Spec.Readers = make([]string, 65) },
		`shards[1] "ds/../x.tar": want the keys sor`: func(j *wire.Job) { j.Shards[1] = "ds/../x.tar" },
		`shards[0] "other/a.tar": want a shard obje`: func(j *wire.Job) { j.Shards[0] = "other/a.tar" },
		`shards[2] "ds/zz": want a shard object`:     func(j *wire.Job) { j.Shards[2] = "ds/zz" },
		"shards[0]: a key of 1029 bytes":             func(j *wire.Job) { j.Shards[0] = "ds/" + strings.Repeat("a", 1022) + ".tar" },
		`bucket "" is not the dataset's ("data")`:    func(j *wire.Job) { j.Bucket = "" },
		`state "" is not a job state`:                func(j *wire.Job) { j.State = "" },
		"no submission time":                         func(j *wire.Job) { j.Submitted = time.Time{} },
		"node_key: want an Ed25519 public key":       func(j *wire.Job) { j.NodeKey = "abcd" },
	} {
		j := good
		j.Shards = append([]string(nil), good.Shards...)
		change(&j)
		key := "ok"
		if strings.HasPrefix(want, "id ") {
			key = "other"
		}
		if err := CheckRecord(key, j); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: CheckRecord = %v", want, err)
		}
	}
}
