package connect

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/testenv"
)

// awsEnv sets the AWS SDK's environment for one test: keys (none when
// empty), no shared files, no instance metadata.
func awsEnv(t *testing.T, accessKey, secretKey string) {
	t.Helper()
	for _, k := range []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_REGION", "AWS_DEFAULT_REGION"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", accessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secretKey)
	if accessKey == "" {
		os.Unsetenv("AWS_ACCESS_KEY_ID")
		os.Unsetenv("AWS_SECRET_ACCESS_KEY")
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", empty)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func checkS3(t *testing.T, endpoint string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := Default()
	c.S3 = S3{Endpoint: endpoint, PathStyle: true}
	client, err := c.S3Client(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return CheckS3(ctx, client, nil)
}

func TestCheckS3(t *testing.T) {
	s3srv, err := embedded.StartS3("")
	if err != nil {
		t.Fatal(err)
	}
	defer s3srv.Close()

	awsEnv(t, "key", "secret")
	if err := checkS3(t, s3srv.Endpoint()); err != nil {
		t.Errorf("reachable, with credentials: %v", err)
	}
	err = checkS3(t, "http://127.0.0.1:1")
	if !errors.Is(err, ErrS3Unreachable) || !strings.Contains(err.Error(), "http://127.0.0.1:1") {
		t.Errorf("closed port: %v; want unreachable, naming the endpoint", err)
	}

	awsEnv(t, "", "")
	err = checkS3(t, s3srv.Endpoint())
	if !errors.Is(err, ErrS3NoCredentials) || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Errorf("no credentials: %v", err)
	}
}

// TestCheckS3Answers: S3's answers about credentials, as a server sends
// them, decoded by the SDK.
func TestCheckS3Answers(t *testing.T) {
	awsEnv(t, "key", "secret")
	for code, want := range map[string]error{
		"InvalidAccessKeyId":    ErrS3WrongCredentials,
		"SignatureDoesNotMatch": ErrS3WrongCredentials,
		"ExpiredToken":          ErrS3WrongCredentials,
		"AccessDenied":          nil, // accepted, may not list buckets
	} {
		endpoint := answer(t, http.StatusForbidden, code)
		err := checkS3(t, endpoint)
		if !errors.Is(err, want) || (want != nil && !strings.Contains(err.Error(), code)) {
			t.Errorf("%s: %v, want %v", code, err, want)
		}
	}
}

// TestCheckS3WrongCredentialsVersitygw asks a real S3 server that checks
// signatures.
func TestCheckS3WrongCredentialsVersitygw(t *testing.T) {
	endpoint := testenv.Versitygw(t, "sluice-key", "sluice-secret")
	awsEnv(t, "sluice-key", "sluice-secret")
	if err := checkS3(t, endpoint); err != nil {
		t.Errorf("right keys: %v", err)
	}
	awsEnv(t, "sluice-key", "wrong-secret")
	err := checkS3(t, endpoint)
	if !errors.Is(err, ErrS3WrongCredentials) || !strings.Contains(err.Error(), "wrong s3 credentials") {
		t.Errorf("wrong secret: %v", err)
	}
	t.Logf("wrong secret: %v", err)
	awsEnv(t, "nobody", "sluice-secret")
	if err := checkS3(t, endpoint); !errors.Is(err, ErrS3WrongCredentials) {
		t.Errorf("unknown access key: %v", err)
	}
}

// answer serves one S3 error answer to every request, on loopback.
func answer(t *testing.T, status int, code string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>`+code+`</Code><Message>as a server says it</Message></Error>`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestWaitS3: an S3 endpoint that refuses connections at first (a
// Service whose pod is starting) and then serves is waited for; one that
// never comes is given up after the wait; an answer that is not
// "unreachable" (wrong credentials) ends the wait at its first request.
func TestWaitS3(t *testing.T) {
	awsEnv(t, "key", "secret")
	client := func(endpoint string) *s3.Client {
		c := Default()
		c.S3 = S3{Endpoint: endpoint, PathStyle: true}
		cl, err := c.S3Client(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused until the server below takes the port
	served := make(chan struct{})
	go func() {
		defer close(served)
		time.Sleep(700 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		srv := &http.Server{Handler: gofakes3.New(s3mem.New()).Server()}
		t.Cleanup(func() { srv.Close() })
		go srv.Serve(ln)
	}()
	if err := WaitS3(context.Background(), client("http://"+addr), nil, 30*time.Second); err != nil {
		t.Errorf("an endpoint serving after 0.7 s: %v", err)
	}
	<-served

	if err := WaitS3(context.Background(), client("http://127.0.0.1:1"), nil, time.Second); !errors.Is(err, ErrS3Unreachable) {
		t.Errorf("an endpoint that never serves: %v, want unreachable", err)
	}

	var requests atomic.Int32
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>no such key</Message></Error>`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	err = WaitS3(context.Background(), client("http://"+ln.Addr().String()), nil, 30*time.Second)
	if !errors.Is(err, ErrS3WrongCredentials) || requests.Load() != 1 {
		t.Errorf("wrong credentials: %v after %d requests, want refused after 1", err, requests.Load())
	}
}

// TestS3CustomCA serves S3 over TLS with a certificate from a CA made in
// the test: trusted with S3.CAFile, refused without it.
func TestS3CustomCA(t *testing.T) {
	pki := newPKI(t)
	cert, err := tls.LoadX509KeyPair(pki.serverCert, pki.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(gofakes3.New(s3mem.New()).Server())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	awsEnv(t, "key", "secret")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := Default()
	c.S3 = S3{Endpoint: srv.URL, PathStyle: true, CAFile: pki.ca}
	client, err := c.S3Client(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckS3(ctx, client, nil); err != nil {
		t.Errorf("with the CA: %v", err)
	}
	c.S3.CAFile = ""
	if client, err = c.S3Client(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := CheckS3(ctx, client, nil); !errors.Is(err, ErrS3TLS) || !strings.Contains(err.Error(), "--s3-ca") {
		t.Errorf("without the CA: %v; want a certificate error", err)
	}
}
