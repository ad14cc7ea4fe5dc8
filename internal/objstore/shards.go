package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// ParseURL splits s3://bucket/prefix into bucket and prefix.
func ParseURL(raw string) (bucket, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return "", "", fmt.Errorf("dataset %q: want s3://bucket/prefix/", raw)
	}
	return u.Host, strings.TrimPrefix(u.Path, "/"), nil
}

// ShardSuffixes are the object name endings taken as shards: WebDataset
// tar, JSON Lines and tab-separated lines (one sample per line), Parquet
// (one sample per row).
var ShardSuffixes = []string{".tar", ".jsonl", ".tsv", ".parquet"}

// ErrNoShards means the prefix exists (or not) but holds no shard objects.
var ErrNoShards = errors.New("no shards")

// ListShards returns the sorted keys of the shards under prefix. A missing
// bucket and an empty prefix are errors that name them.
func ListShards(ctx context.Context, c *s3.Client, bucket, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing s3://%s/%s: %w", bucket, prefix, Explain(err))
		}
		for _, o := range page.Contents {
			for _, s := range ShardSuffixes {
				if strings.HasSuffix(aws.ToString(o.Key), s) {
					keys = append(keys, aws.ToString(o.Key))
				}
			}
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("s3://%s/%s: %w (objects ending in %s)", bucket, prefix, ErrNoShards, strings.Join(ShardSuffixes, ", "))
	}
	sort.Strings(keys)
	return keys, nil
}

// Explain shortens SDK errors to their S3 error code and message, which is
// what a user needs (NoSuchBucket, AccessDenied), and leaves others as they are.
func Explain(err error) error {
	var api smithy.APIError
	if errors.As(err, &api) {
		return fmt.Errorf("%s: %s", api.ErrorCode(), api.ErrorMessage())
	}
	return err
}
