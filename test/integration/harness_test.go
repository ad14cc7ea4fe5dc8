package integration

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/objstore"

	"github.com/sluice-project/sluice/internal/testenv"
)

// TestIntegrationHarness checks the parts the scenarios stand on: the
// nats-server takes the user and client certificate and survives a
// restart with its store, versitygw serves the dataset, and the fault
// proxy's faults reach an S3 client, which retries them.
func TestIntegrationHarness(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{Faults: &FaultOptions{Seed: 1, SlowDown: 0.15, Internal: 0.15, Reset: 0.1, SlowBody: 0.1}})
	d := c.UploadImages("harness", "imgs/", SmallImages(40, 4, 1))
	if len(d.Keys) != 40 {
		t.Fatalf("dataset keys: %d, want 40", len(d.Keys))
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, js := c.JetStream()
	kv, err := js.CreateKeyValue(ctx, jetstreamKV("itest_harness"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := c.NATS.Restart(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.NATS.WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		_, err := kv.Get(ctx, "k")
		return err
	})

	// Through the proxy, with the SDK's retries: every shard lists and reads.
	cfg := c.S3.Config(c.Proxy.Endpoint())
	cfg.MaxAttempts = 3 // the test retries on top, to see faults reach it
	cfg.MaxBackoff = 50 * time.Millisecond
	cl, err := objstore.NewClient(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The SDK makes 3 attempts; the test tries again on top, as a
	// product's own retries would.
	var keys []string
	testenv.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		keys, err = objstore.ListShards(ctx, cl, d.Bucket, d.Prefix)
		return err
	})
	if len(keys) != 4 {
		t.Fatalf("listing through the proxy: %v", keys)
	}
	for range 5 {
		for _, k := range keys {
			testenv.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
				out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: &d.Bucket, Key: &k})
				if err != nil {
					return err
				}
				defer out.Body.Close()
				_, err = io.Copy(io.Discard, out.Body)
				return err
			})
		}
	}
	if c.Proxy.InjectedTotal() == 0 {
		t.Fatalf("no faults injected: %s", c.Proxy.Summary())
	}
	t.Logf("fault proxy: %s", c.Proxy.Summary())

	// Wrong credentials are refused by versitygw itself.
	badCfg := c.S3.Config(c.S3.Endpoint())
	badCfg.Credentials = credentials.NewStaticCredentialsProvider(c.S3.AccessKey, "wrong", "")
	bad, _ := objstore.NewClient(ctx, badCfg, nil)
	if _, err := objstore.ListShards(ctx, bad, d.Bucket, d.Prefix); err == nil || !strings.Contains(err.Error(), "Signature") {
		t.Fatalf("listing with a wrong secret: %v, want a signature error", err)
	}
}

func jetstreamKV(name string) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: name, Storage: jetstream.FileStorage}
}
