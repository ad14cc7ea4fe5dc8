// Package objstore builds S3 clients, parses s3:// URLs and lists a
// dataset's shards. It talks the S3 protocol through the AWS SDK, to AWS or
// to any compatible endpoint.
//
// Credentials come only from the SDK's default chain (environment, shared
// config and profiles, web identity, instance metadata); Config.Credentials
// exists for the embedded endpoint and tests, never for user input. Clients
// retry throttling, server errors and broken connections with exponential
// backoff and jitter, more often than the SDK's default, and count retries
// in sluice_s3_retries_total.
package objstore
