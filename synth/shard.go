package synth

import (
	"bytes"
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Shard is one generated shard, of any dataset kind.
type Shard struct {
	// Name is the object name, with the suffix that says the format
	// (".tar", ".jsonl", ".tsv").
	Name    string
	Data    []byte
	Samples int
	Corrupt []string // keys of the corrupt samples
}

// Upload creates bucket if needed and writes each shard under prefix.
func Upload(ctx context.Context, c *s3.Client, bucket, prefix string, shards []Shard) error {
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		if _, herr := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket}); herr != nil {
			return fmt.Errorf("creating bucket %s: %w", bucket, err)
		}
	}
	for _, s := range shards {
		key := prefix + s.Name
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(s.Data)}); err != nil {
			return fmt.Errorf("uploading s3://%s/%s: %w", bucket, key, err)
		}
	}
	return nil
}
