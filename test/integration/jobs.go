package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sluice-project/sluice/wire"
	"gopkg.in/yaml.v3"

	"github.com/sluice-project/sluice/internal/testenv"
)

// Spec is a job spec file's content (keys as in wire.JobSpec's JSON).
type Spec map[string]any

// WriteSpec writes spec as a YAML file in the cluster directory.
func (c *Cluster) WriteSpec(name string, spec Spec) string {
	c.T.Helper()
	b, err := yaml.Marshal(map[string]any(spec))
	if err != nil {
		c.T.Fatal(err)
	}
	path := filepath.Join(c.Dir, name+".yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		c.T.Fatal(err)
	}
	return path
}

// Submit writes spec and submits it with `sluice job submit`.
func (c *Cluster) Submit(spec Spec) Result {
	c.T.Helper()
	return c.MustSluice("job", "submit", c.WriteSpec(fmt.Sprint(spec["id"]), spec))
}

// JetStream is a test-side client of the cluster's server; it reconnects
// across restarts and closes when the test ends.
func (c *Cluster) JetStream() (*nats.Conn, jetstream.JetStream) {
	c.T.Helper()
	nc, err := c.NATS.Connect()
	if err != nil {
		c.T.Fatal(err)
	}
	c.T.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		c.T.Fatal(err)
	}
	return nc, js
}

// Job reads a job's record from the jobs bucket.
func Job(ctx context.Context, js jetstream.JetStream, id string) (wire.Job, error) {
	kv, err := js.KeyValue(ctx, wire.JobsBucket)
	if err != nil {
		return wire.Job{}, fmt.Errorf("opening %s: %w", wire.JobsBucket, err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		return wire.Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	var j wire.Job
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return wire.Job{}, fmt.Errorf("job %s: %w", id, err)
	}
	return j, nil
}

// WaitJobState polls the job's record until it is in state want.
func (c *Cluster) WaitJobState(js jetstream.JetStream, id string, want wire.JobState, within time.Duration) wire.Job {
	c.T.Helper()
	var j wire.Job
	defer func() {
		if c.T.Failed() {
			c.T.Logf("job %s in JetStream:\n%s", id, DescribeJob(js, id))
		}
	}()
	testenv.CheckFor(c.T, within, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if j, err = Job(ctx, js, id); err != nil {
			return err
		}
		if j.State != want {
			return fmt.Errorf("job %s is %s (%s), want %s", id, j.State, j.Reason, want)
		}
		return nil
	})
	return j
}

// JobStatus reads the live status a job's owning controller wrote (its
// last, with the terminal state, once the job ended).
func JobStatus(ctx context.Context, js jetstream.JetStream, id string) (wire.JobStatus, error) {
	kv, err := js.KeyValue(ctx, wire.StatusBucket)
	if err != nil {
		return wire.JobStatus{}, fmt.Errorf("opening %s: %w", wire.StatusBucket, err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		return wire.JobStatus{}, fmt.Errorf("status of job %s: %w", id, err)
	}
	var s wire.JobStatus
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return wire.JobStatus{}, fmt.Errorf("status of job %s: %w", id, err)
	}
	return s, nil
}
