// Package imagejob sets up what tests of a `sluice fn serve` replica
// share: a one-shard image job (a tar shard of synthetic JPEGs in the
// test S3 endpoint, the job submitted on the test NATS server), the
// shard's task as the dispatcher would send it, and a replica started
// against both.
//
// It is apart from testenv because it needs the broker, whose own tests
// use testenv.
package imagejob
