package integration

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-project/sluice/internal/objstore"
)

// S3Server is a versitygw process serving a directory over S3 with one
// access key.
type S3Server struct {
	*Process
	Port      int
	Dir       string
	AccessKey string
	SecretKey string
}

// StartS3Server starts versitygw on a free loopback port over dir/s3.
func StartS3Server(t testing.TB, bin, dir string) *S3Server {
	t.Helper()
	s := &S3Server{Port: MustFreePort(t), Dir: filepath.Join(dir, "s3"), AccessKey: "itest-access", SecretKey: "itest-secret-key"}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.Process = StartProcess(t, dir, "versitygw", bin, []string{
		"--access", s.AccessKey, "--secret", s.SecretKey,
		"--port", "127.0.0.1:" + strconv.Itoa(s.Port), "--quiet",
		"posix", s.Dir,
	}, nil)
	if err := WaitTCP(s.Addr(), 30*time.Second); err != nil {
		t.Fatalf("versitygw: %v\n%s", err, s.Tail(30))
	}
	return s
}

// Addr is host:port.
func (s *S3Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Endpoint is the S3 endpoint URL.
func (s *S3Server) Endpoint() string { return "http://" + s.Addr() }

// Client is an S3 client with the server's static credentials, for the
// test's own uploads (the sluice processes get theirs from the AWS SDK's
// default chain, through their environment).
func (s *S3Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	c, err := objstore.NewClient(context.Background(), s.Config(s.Endpoint()), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Config reaches endpoint (the server's or a proxy's) with the server's
// static credentials, as the test's own client.
func (s *S3Server) Config(endpoint string) objstore.Config {
	return objstore.Config{Endpoint: endpoint, PathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, "")}
}

// Env is what a sluice process needs to sign its S3 requests.
func (s *S3Server) Env() []string {
	return S3Env(s.AccessKey, s.SecretKey)
}

// S3Env gives a process these credentials and nothing from the machine's
// own AWS configuration or instance metadata.
func S3Env(access, secret string) []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + access, "AWS_SECRET_ACCESS_KEY=" + secret, "AWS_REGION=us-east-1",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true",
	}
}
