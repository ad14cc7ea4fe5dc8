// Package objstore builds S3 clients from Sluice's flags and environment,
// parses s3:// URLs and lists a dataset's shards. It talks the S3 protocol
// through the AWS SDK, to AWS or to any compatible endpoint.
package objstore
