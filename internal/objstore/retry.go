package objstore

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// NewRetryer is the SDK's standard retryer with more attempts: it retries
// 500, 502, 503 and 504 answers, throttling codes (SlowDown among them),
// RequestTimeout, and connection errors (refused, reset, timed out), after
// an exponential backoff with full jitter capped at maxBackoff.
//
// The SDK's client-side retry quota is off: it exists to stop retry
// storms against AWS, but a data loader that shares one client between many
// concurrent shard reads would exhaust it in one burst of SlowDown answers
// and then fail requests that one more backoff would have saved. The
// bounded attempts and the backoff already keep retries in check.
func NewRetryer(maxAttempts int, maxBackoff time.Duration) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		o.MaxBackoff = maxBackoff
		o.Backoff = retry.NewExponentialJitterBackoff(maxBackoff)
		o.RateLimiter = ratelimit.None
	})
}
