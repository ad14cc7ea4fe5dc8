package objstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
)

// Config says how to reach S3. Credentials are not part of it: they come
// from the AWS SDK's default chain.
type Config struct {
	// Endpoint is a custom endpoint URL (MinIO, versitygw, the embedded
	// endpoint); empty means AWS itself.
	Endpoint string
	// Region; empty takes the SDK's (AWS_REGION, the profile), else DefaultRegion.
	Region string
	// PathStyle addresses buckets as endpoint/bucket rather than
	// bucket.endpoint, which most S3-compatible servers need.
	PathStyle bool
	// CAFile is a PEM bundle of CAs to trust instead of the system's.
	CAFile string
	// MaxAttempts per request, first included (default DefaultMaxAttempts).
	MaxAttempts int
	// MaxBackoff caps the jittered wait between attempts (default DefaultMaxBackoff).
	MaxBackoff time.Duration
	// Credentials replaces the SDK's default chain. Only for the embedded
	// endpoint and tests, which hold their own keys; never set it from user
	// input (flags, files), which would put secrets where they leak.
	Credentials aws.CredentialsProvider
}

// Defaults.
const (
	DefaultRegion      = "us-east-1"
	DefaultMaxAttempts = 8
	DefaultMaxBackoff  = 20 * time.Second
	// responseHeaderTimeout bounds the wait for an answer to a request
	// already sent, so a server that hangs is retried rather than waited on.
	responseHeaderTimeout = time.Minute
)

// NewClient builds an S3 client. With a custom endpoint it sends checksums
// only when required, which S3-compatible servers expect. reg, when not
// nil, gets the client's request and retry counters (registering twice is
// fine: the second client shares the first one's counters).
func NewClient(ctx context.Context, c Config, reg prometheus.Registerer) (*s3.Client, error) {
	if c.Endpoint != "" {
		if u, err := url.ParseRequestURI(c.Endpoint); err != nil || u.Host == "" {
			return nil, fmt.Errorf("s3 endpoint %q: want http(s)://host[:port]", c.Endpoint)
		}
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	hc, err := httpClient(c.CAFile)
	if err != nil {
		return nil, err
	}
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(hc),
		config.WithRetryer(func() aws.Retryer { return NewRetryer(c.MaxAttempts, c.MaxBackoff) }),
	}
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	if c.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(c.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading aws config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	m := newMetrics(reg)
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
		o.UsePathStyle = c.PathStyle
		o.APIOptions = append(o.APIOptions, m.addTo)
	}), nil
}

// httpClient is the SDK's own client, trusting caFile's CAs when given.
func httpClient(caFile string) (*awshttp.BuildableClient, error) {
	var pool *x509.CertPool
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading s3 ca bundle: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("s3 ca bundle %s: no PEM certificates", caFile)
		}
	}
	return awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.ResponseHeaderTimeout = responseHeaderTimeout
		if pool != nil {
			if tr.TLSClientConfig == nil {
				tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			tr.TLSClientConfig.RootCAs = pool
		}
	}), nil
}
