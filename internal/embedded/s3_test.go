package embedded_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/objstore"
)

// TestS3DirKeepsObjectsAcrossARestart: what the S3 client puts into a
// directory-backed endpoint is listed and read back, whole and by range,
// by the next endpoint on that directory.
func TestS3DirKeepsObjectsAcrossARestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	client := func(srv *embedded.S3) *s3.Client {
		c, err := objstore.NewClient(ctx, objstore.Config{Endpoint: srv.Endpoint(), PathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	body := bytes.Repeat([]byte("0123456789"), 100_000)
	srv, err := embedded.StartS3Dir("", dir)
	if err != nil {
		t.Fatal(err)
	}
	c := client(srv)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("data")}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"train/a.tar", "train/b.tar"} {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String(k), Body: bytes.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Close()

	srv, err = embedded.StartS3Dir("", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c = client(srv)
	keys, err := objstore.ListShards(ctx, c, "data", "train/")
	if err != nil || len(keys) != 2 {
		t.Fatalf("after a restart: shards %v (%v), want the two put", keys, err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("train/b.tar")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes, differing from the %d put", len(got), len(body))
	}
	out, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("train/a.tar"), Range: aws.String("bytes=10-19")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != "0123456789" {
		t.Fatalf("range read %q", got)
	}
}
