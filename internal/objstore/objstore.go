package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// Config says how to reach S3. Empty fields fall back to the AWS SDK's
// usual sources (environment, shared config, instance roles).
type Config struct {
	// Endpoint is a custom endpoint URL (MinIO, versitygw, the embedded
	// endpoint); empty means AWS itself.
	Endpoint  string `json:"endpoint,omitempty"`
	Region    string `json:"region,omitempty"`
	AccessKey string `json:"access_key,omitempty"`
	SecretKey string `json:"secret_key,omitempty"`
}

// FromEnv fills empty fields from SLUICE_S3_ENDPOINT, AWS_REGION,
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
func (c Config) FromEnv() Config {
	set := func(p *string, env string) {
		if *p == "" {
			*p = os.Getenv(env)
		}
	}
	set(&c.Endpoint, "SLUICE_S3_ENDPOINT")
	set(&c.Region, "AWS_REGION")
	set(&c.AccessKey, "AWS_ACCESS_KEY_ID")
	set(&c.SecretKey, "AWS_SECRET_ACCESS_KEY")
	return c
}

// NewClient builds an S3 client. With a custom endpoint it uses path-style
// addressing and sends checksums only when required, which S3-compatible
// servers expect.
func NewClient(ctx context.Context, c Config) (*s3.Client, error) {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(c.Region)}
	if c.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading aws config: %w", err)
	}
	if c.Endpoint != "" {
		if _, err := url.ParseRequestURI(c.Endpoint); err != nil {
			return nil, fmt.Errorf("s3 endpoint %q: %w", c.Endpoint, err)
		}
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
			o.UsePathStyle = true
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	}), nil
}

// ParseURL splits s3://bucket/prefix into bucket and prefix.
func ParseURL(raw string) (bucket, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return "", "", fmt.Errorf("dataset %q: want s3://bucket/prefix/", raw)
	}
	return u.Host, strings.TrimPrefix(u.Path, "/"), nil
}

// ShardSuffixes are the object name endings taken as shards: WebDataset
// tar, JSON Lines and tab-separated lines (one sample per line).
var ShardSuffixes = []string{".tar", ".jsonl", ".tsv"}

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
