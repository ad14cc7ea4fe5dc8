package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/objstore"
)

// NATS starts a JetStream server with its store in t.TempDir and returns a
// connection to it.
func NATS(t testing.TB) (*embedded.NATS, *nats.Conn) {
	t.Helper()
	srv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return srv, nc
}

// The keys of the test S3 endpoint (gofakes3 takes any).
const (
	S3AccessKey = "test"
	S3SecretKey = "test"
)

// S3Env is the environment a child process needs to find the test S3
// endpoint's credentials through the AWS SDK's default chain.
func S3Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + S3AccessKey, "AWS_SECRET_ACCESS_KEY=" + S3SecretKey}
}

// S3 starts an S3 endpoint, creates bucket and returns a client and the
// config that reaches it (with the test keys as its credentials, so that
// the test's own environment does not matter).
func S3(t testing.TB, bucket string) (*s3.Client, objstore.Config) {
	t.Helper()
	srv, err := embedded.StartS3("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cfg := objstore.Config{Endpoint: srv.Endpoint(), PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(S3AccessKey, S3SecretKey, "")}
	c, err := objstore.NewClient(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bucket != "" {
		if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
			t.Fatal(err)
		}
	}
	return c, cfg
}

// CheckFor calls f every sleep until it returns nil or total has passed,
// then fails the test with f's last error.
func CheckFor(t testing.TB, total, sleep time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(sleep)
	}
	t.Fatalf("after %v: %v", total, err)
}
