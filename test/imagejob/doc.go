// Package imagejob sets up what tests of a `sluice fn serve` replica
// share: a one-shard image job (a tar shard of synthetic JPEGs in the
// test S3 endpoint), the shard's task as an agent would send it, and a
// replica started against it.
//
// It is apart from testenv because it needs the local actuator's ready
// line, whose own tests use testenv.
package imagejob
