package broker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/wire"
)

// MaxShardKeyBytes bounds a shard's object key in a job record: S3's own
// limit on a key.
const MaxShardKeyBytes = 1024

// CheckRecord returns what is wrong with job, a record read from the job
// store under key, or nil. The job store may be written by anyone who may
// write to it, not only by Submit: a controller acts only on a record
// that passes. It checks what Submit made sure of and what the
// controller relies on: the spec's fields (wire.JobSpec.Problems: the
// counts and sizes a controller allocates by), the record's key, bucket
// and state, and that every shard is a shard object under the dataset's
// prefix, each once, in order. It does not build the pipeline: the
// functions do, and refuse one that does not build.
func CheckRecord(key string, job wire.Job) error {
	var ps []string
	if job.Spec.ID != key {
		ps = append(ps, fmt.Sprintf("id %q under key %q", job.Spec.ID, key))
	}
	for _, p := range job.Spec.Problems() {
		ps = append(ps, p.Error())
	}
	if len(job.Spec.Sources) > 0 || len(job.Sources) > 0 {
		ps = append(ps, sourceProblems(job)...)
	} else if bucket, prefix, err := objstore.ParseURL(job.Spec.Dataset); err == nil {
		if job.Bucket != bucket {
			ps = append(ps, fmt.Sprintf("bucket %q is not the dataset's (%q)", job.Bucket, bucket))
		}
		ps = append(ps, shardProblems(job.Shards, prefix)...)
	}
	switch job.State {
	case wire.JobQueued, wire.JobRunning, wire.JobSucceeded, wire.JobFailed, wire.JobCancelled:
	default:
		ps = append(ps, fmt.Sprintf("state %q is not a job state", job.State))
	}
	if a := job.AgentAuth; a != "" && !isSHA256Hex(a) {
		ps = append(ps, "agent_auth is not a SHA-256 (64 hex digits)")
	}
	if k := job.NodeKey; k != "" {
		if _, err := wire.ParseNodeKey(k); err != nil {
			ps = append(ps, err.Error())
		}
	}
	if job.Submitted.IsZero() {
		ps = append(ps, "no submission time")
	}
	if len(ps) == 0 {
		return nil
	}
	return fmt.Errorf("job record %q: %s", key, strings.Join(ps, "; "))
}

// shardProblems checks a record's shard keys: each a shard object under
// prefix, within MaxShardKeyBytes, sorted and each once (as Submit lists
// them). It reports the first bad key only: a record may hold many.
func shardProblems(shards []string, prefix string) []string {
	for i, k := range shards {
		switch {
		case len(k) > MaxShardKeyBytes:
			return []string{fmt.Sprintf("shards[%d]: a key of %d bytes, want at most %d", i, len(k), MaxShardKeyBytes)}
		case !strings.HasPrefix(k, prefix) || !slices.ContainsFunc(objstore.ShardSuffixes, func(s string) bool { return strings.HasSuffix(k, s) }):
			return []string{fmt.Sprintf("shards[%d] %q: want a shard object (%s) under the dataset's prefix %q",
				i, k, strings.Join(objstore.ShardSuffixes, ", "), prefix)}
		case i > 0 && k <= shards[i-1]:
			return []string{fmt.Sprintf("shards[%d] %q: want the keys sorted, each once", i, k)}
		}
	}
	return nil
}

// sourceProblems checks a mixed job's record: one source per source of
// its spec, each in its dataset's bucket, their parts of the epoch
// following one another over every shard, each key a shard object under
// its source's prefix (repeats allowed: a source repeated).
func sourceProblems(job wire.Job) []string {
	if len(job.Sources) != len(job.Spec.Sources) {
		return []string{fmt.Sprintf("sources: %d in the record, %d in the spec", len(job.Sources), len(job.Spec.Sources))}
	}
	if job.Bucket != "" {
		return []string{fmt.Sprintf("bucket %q: a mixed job's buckets are its sources'", job.Bucket)}
	}
	next := 0
	for i, src := range job.Sources {
		bucket, prefix, err := objstore.ParseURL(job.Spec.Sources[i].Dataset)
		if err != nil {
			continue // the spec's problem, reported
		}
		switch {
		case src.Bucket != bucket:
			return []string{fmt.Sprintf("sources[%d]: bucket %q is not its dataset's (%q)", i, src.Bucket, bucket)}
		case src.First != next || src.Slots < 1 || src.Slots > len(job.Shards)-next || src.Listed < 1:
			return []string{fmt.Sprintf("sources[%d]: shards %d..%d (listed %d): want 1 or more from %d, within the %d shards", i, src.First, src.First+src.Slots-1, src.Listed, next, len(job.Shards))}
		}
		for k := src.First; k < src.First+src.Slots; k++ {
			if key := job.Shards[k]; len(key) > MaxShardKeyBytes || !strings.HasPrefix(key, prefix) ||
				!slices.ContainsFunc(objstore.ShardSuffixes, func(s string) bool { return strings.HasSuffix(key, s) }) {
				return []string{fmt.Sprintf("shards[%d]: want a shard object (%s) of at most %d bytes under sources[%d]'s prefix %q",
					k, strings.Join(objstore.ShardSuffixes, ", "), MaxShardKeyBytes, i, prefix)}
			}
		}
		next += src.Slots
	}
	if next != len(job.Shards) {
		return []string{fmt.Sprintf("shards: %d, the sources' parts %d", len(job.Shards), next)}
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
