package integration

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"

	"github.com/sluice-project/sluice/internal/testenv"
)

// TestIntegrationBadInput: mistakes at the control surface, through the
// real binaries, get a clear error naming the problem, a non-zero exit,
// and change nothing in the job store.
func TestIntegrationBadInput(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("badinput", "train/", SmallImages(40, 4, 17))
	_, js := c.JetStream()
	good := func(id string) Spec { return imageJob(id, d, "imagenet-eval") }

	// refused runs args (with the cluster's connection flags, as edited by
	// conn) and env, and checks the exit status, that stderr has every
	// one of want (case-insensitive), and that the job store is unchanged.
	refused := func(t *testing.T, env []string, conn func([]string) []string, want []string, args ...string) Result {
		t.Helper()
		c := c.For(t)
		before := jobRecords(t, js)
		connArgs := c.ConnArgs()
		if conn != nil {
			connArgs = conn(connArgs)
		}
		r := c.SluiceWithin(time.Minute, env, append(args, connArgs...)...)
		if r.Code <= 0 {
			t.Fatalf("want an error and a non-zero exit:\n%s", r)
		}
		for _, w := range want {
			if !strings.Contains(strings.ToLower(r.Stderr), strings.ToLower(w)) {
				t.Errorf("stderr does not say %q:\n%s", w, r)
			}
		}
		if after := jobRecords(t, js); !maps.Equal(before, after) {
			t.Errorf("job store changed: before %v, after %v", before, after)
		}
		t.Logf("exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
		return r
	}

	t.Run("invalid spec", func(t *testing.T) {
		c := c.For(t)
		s := good("invalid")
		s["batch_size"], s["epochs"] = 0, -1
		refused(t, nil, nil, []string{"batch_size", "epochs"}, "job", "submit", c.WriteSpec("invalid", s))
	})
	t.Run("prefix without shards", func(t *testing.T) {
		c := c.For(t)
		s := good("noshards")
		s["dataset"] = "s3://" + d.Bucket + "/nothing-here/"
		refused(t, nil, nil, []string{"no shards"}, "job", "submit", c.WriteSpec("noshards", s))
	})
	t.Run("missing bucket", func(t *testing.T) {
		c := c.For(t)
		s := good("nobucket")
		s["dataset"] = "s3://no-such-bucket/train/"
		refused(t, nil, nil, []string{"no-such-bucket"}, "job", "submit", c.WriteSpec("nobucket", s))
	})
	wrongS3 := S3Env(c.S3.AccessKey, "not-the-secret")
	t.Run("wrong S3 credentials at submit", func(t *testing.T) {
		c := c.For(t)
		refused(t, wrongS3, nil, []string{"credentials"}, "job", "submit", c.WriteSpec("wrongs3", good("wrongs3")))
	})
	// A replica takes S3 settings and nothing else: its output goes back
	// in the response to each task, not through NATS.
	noNATS := func([]string) []string { return nil }
	t.Run("wrong S3 credentials at fn serve", func(t *testing.T) {
		refused(t, wrongS3, noNATS, []string{"credentials"}, "fn", "serve", "--listen", "127.0.0.1:0")
	})
	t.Run("NATS flags at fn serve", func(t *testing.T) {
		refused(t, nil, nil, []string{"flag provided but not defined", "-nats"}, "fn", "serve", "--listen", "127.0.0.1:0")
	})
	wrongPassword := func(args []string) []string { return withFlag(args, "--nats-password", "not-the-password") }
	t.Run("wrong NATS password", func(t *testing.T) {
		c := c.For(t)
		refused(t, nil, wrongPassword, []string{"authorization"}, "job", "list")
		refused(t, nil, wrongPassword, []string{"authorization"}, "job", "submit", c.WriteSpec("wrongnats", good("wrongnats")))
	})
	t.Run("duplicate job id", func(t *testing.T) {
		c := c.For(t)
		c.Submit(good("dup"))
		refused(t, nil, nil, []string{"dup", "exists"}, "job", "submit", c.WriteSpec("dup", good("dup")))
	})
	t.Run("delete a running job", func(t *testing.T) {
		c := c.For(t)
		// No agent takes its tasks, so the job stays running.
		c.StartController("controller", ControllerOptions{})
		c.Submit(good("running"))
		c.WaitJobState(js, "running", wire.JobRunning, time.Minute)
		refused(t, nil, nil, []string{"--force"}, "job", "delete", "running")
		c.MustSluice("job", "delete", "running", "--force")
		testenv.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
			if _, ok := jobRecords(t, js)["running"]; ok {
				return errors.New("job running: record still there after delete --force")
			}
			return jobLeftovers(js, "running")
		})
	})
}

// jobRecords maps each job id in the jobs bucket to its entry's revision.
func jobRecords(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]uint64{}
	kv, err := js.KeyValue(ctx, wire.JobsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = e.Revision()
	}
	return out
}

// withFlag returns args with flag's value replaced (or flag added).
func withFlag(args []string, flag, value string) []string {
	out := slices.Clone(args)
	if i := slices.Index(out, flag); i >= 0 && i+1 < len(out) {
		out[i+1] = value
		return out
	}
	return append(out, flag, value)
}
