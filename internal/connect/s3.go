package connect

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/objstore"
)

// S3Client builds an S3 client for c.S3 with credentials from the AWS
// SDK's default chain, retrying as objstore.NewRetryer does; reg (nil ok)
// gets sluice_s3_requests_total and sluice_s3_retries_total.
func (c Config) S3Client(ctx context.Context, reg prometheus.Registerer) (*s3.Client, error) {
	return objstore.NewClient(ctx, c.Objstore(), reg)
}

// s3CheckTimeout bounds CheckS3, credential lookup included.
const s3CheckTimeout = 15 * time.Second

// CheckS3 asks S3 to list buckets, once (no retries), and says whether the
// endpoint answers and accepts the credentials: ErrS3Unreachable, ErrS3TLS,
// ErrS3NoCredentials or ErrS3WrongCredentials (errors.Is). AccessDenied
// counts as success: the credentials were accepted, and least-privilege
// roles often may not list buckets (s3:ListAllMyBuckets).
func CheckS3(ctx context.Context, client *s3.Client, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, s3CheckTimeout)
	defer cancel()
	_, err := client.ListBuckets(ctx, &s3.ListBucketsInput{}, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "AccessDenied" {
		logger.Debug("s3 credentials accepted; listing buckets is not allowed", "err", api.ErrorMessage())
		return nil
	}
	return ExplainS3(err, aws.ToString(client.Options().BaseEndpoint))
}

// WaitS3 is CheckS3 tried again while S3 is unreachable, for up to
// within: a replica started beside its S3 endpoint (a Service whose pods
// are not ready yet refuses connections) should not exit over it, since
// Knative takes a first pod that exits for a revision that never works.
// Any other answer ends it at once.
func WaitS3(ctx context.Context, client *s3.Client, logger *slog.Logger, within time.Duration) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	deadline := time.Now().Add(within)
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		// An endpoint that drops packets must not hold an attempt past the
		// wait (without one, the single attempt keeps CheckS3's bound).
		actx, cancel := ctx, context.CancelFunc(func() {})
		if within > 0 {
			actx, cancel = context.WithDeadline(ctx, deadline)
		}
		err := CheckS3(actx, client, logger)
		cancel()
		if err == nil || !errors.Is(err, ErrS3Unreachable) || time.Now().Add(wait).After(deadline) {
			return err
		}
		logger.Warn("s3 not reachable yet; trying again", "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// wrongCredentialCodes are the S3 error codes for an unknown access key,
// a secret that does not match it, or a bad session token.
var wrongCredentialCodes = map[string]bool{
	"InvalidAccessKeyId":    true,
	"SignatureDoesNotMatch": true,
	"InvalidToken":          true,
	"ExpiredToken":          true,
	"TokenRefreshRequired":  true,
	"InvalidSecurity":       true,
	"InvalidClientTokenId":  true,
	"XAdminUserNotFound":    true, // versitygw: no such access key
}

// ExplainS3 classifies an error from an S3 call as one of the check's
// errors when it is one, naming the endpoint ("" for AWS).
func ExplainS3(err error, endpoint string) error {
	at := "AWS S3"
	if endpoint != "" {
		at = endpoint
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		if wrongCredentialCodes[api.ErrorCode()] {
			return fmt.Errorf("%w at %s: %s: %s (check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile)", ErrS3WrongCredentials, at, api.ErrorCode(), api.ErrorMessage())
		}
		return fmt.Errorf("s3 at %s: %s: %s", at, api.ErrorCode(), api.ErrorMessage())
	}
	if isNoCredentials(err) {
		return fmt.Errorf("%w for %s: the AWS SDK's default chain has none (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, a web identity token, or run with an instance role): %v", ErrS3NoCredentials, at, err)
	}
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	if errors.As(err, &verify) || errors.As(err, &unknown) {
		return fmt.Errorf("%w at %s: %v (trust its CA with --s3-ca)", ErrS3TLS, at, err)
	}
	var send *smithyhttp.RequestSendError
	if errors.As(err, &send) || errors.Is(err, context.DeadlineExceeded) || isNetError(err) {
		return fmt.Errorf("%w at %s: %v", ErrS3Unreachable, at, err)
	}
	return fmt.Errorf("s3 at %s: %w", at, err)
}

// isNoCredentials recognises the SDK's failure to find credentials, which
// it reports as text only ("get identity: get credentials: failed to
// refresh cached credentials, no EC2 IMDS role found...").
func isNoCredentials(err error) bool {
	s := err.Error()
	return strings.Contains(s, "get credentials:") || strings.Contains(s, "failed to retrieve credentials") ||
		strings.Contains(s, "get identity:")
}
