package shardcache

import (
	"fmt"
	"sync"
)

// Bypass says why a shard read from S3 was not cached by a cache that is
// meant to cache: the reason label of sluice_cache_bypass_total, and what
// the cache logs once per job.
type Bypass string

const (
	// BypassNoETag: S3 gives the object no ETag (or no length), as a
	// gateway does for files dropped into its directory. A copy could not
	// be told from a changed object, so none is kept.
	BypassNoETag Bypass = "no_etag"
	// BypassNoRoom: no tier has room for the shard, and no entry is cold
	// enough to evict (see Admit).
	BypassNoRoom Bypass = "no_room"
	// BypassNoDirectory: the cache directory cannot be used, and no
	// memory tier took the shard.
	BypassNoDirectory Bypass = "no_directory"
	// BypassFillWait: another read of the shard (in this process or
	// another sharing the directory) was still filling its entry after
	// Config.FillWait; this read went to S3 rather than wait longer.
	BypassFillWait Bypass = "fill_wait"
)

// maxBypassesTold bounds the (job, reason) pairs remembered as logged; past
// it the memory starts afresh, and a job may be told about again.
const maxBypassesTold = 4096

// bypassLog says once per job and reason why shards are not cached.
type bypassLog struct {
	mu   sync.Mutex
	told map[[2]string]bool
}

// bypassed counts a read not cached for why, and logs it the first time
// job meets why.
func (c *Cache) bypassed(job, key string, size int64, why Bypass) {
	c.m.bypasses.WithLabelValues(string(why)).Inc()
	b := &c.bypasses
	b.mu.Lock()
	k := [2]string{job, string(why)}
	first := !b.told[k]
	if first {
		if b.told == nil || len(b.told) >= maxBypassesTold {
			b.told = map[[2]string]bool{}
		}
		b.told[k] = true
	}
	b.mu.Unlock()
	if first {
		c.log.Warn("the shard cache does not cache this job's shards: reading them from S3 every epoch",
			"job", job, "reason", string(why), "detail", c.explain(why, size), "key", key)
	}
}

// explain says why in words, with the numbers that matter.
func (c *Cache) explain(why Bypass, size int64) string {
	switch why {
	case BypassNoETag:
		return "S3 gives the object no ETag (files dropped into a gateway's directory?), so a cached copy could not be checked against it"
	case BypassNoRoom:
		return fmt.Sprintf("a shard of %d bytes does not fit the cache (disk budget %d, memory budget %d bytes), full of entries used lately",
			size, c.cfg.DiskBytes, c.cfg.MemoryBytes)
	case BypassNoDirectory:
		return fmt.Sprintf("the cache directory %q cannot be used (see the warning before)", c.cfg.Dir)
	case BypassFillWait:
		return fmt.Sprintf("another read of the shard was still caching it after %v (a slow consumer?), so this one read it from S3", c.cfg.FillWait)
	}
	return string(why)
}
