package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/bytesize"
)

// cacheFlags are the shard cache settings of `fn serve`, which `sluice
// controller` takes too and hands to the replicas it starts.
type cacheFlags struct {
	dir         *string
	diskBytes   *string
	memoryBytes *string
	horizon     *time.Duration
}

func registerCacheFlags(fs *flag.FlagSet, who string) cacheFlags {
	return cacheFlags{
		dir: fs.String("cache-dir", "", "directory for the shard cache"+who+
			" (replicas of one machine may share it); empty: no disk cache"),
		diskBytes:   fs.String("cache-bytes", "0", "disk budget of --cache-dir, for every replica sharing it (e.g. 20GiB)"),
		memoryBytes: fs.String("cache-memory-bytes", "0", "memory budget of each replica's shard cache (e.g. 512MiB); 0: none"),
		horizon: fs.Duration("cache-idle-horizon", shardcache.DefaultIdleHorizon,
			"least time a cached shard goes unread before another may replace it (longer when epochs are: twice the longest reuse seen)"),
	}
}

// resolve checks the flags and fills c.
func (f cacheFlags) resolve(c *shardcache.Config) func() error {
	return func() error {
		var errs []error
		size := func(name, v string) int64 {
			n, err := bytesize.Parse(v)
			if err != nil || n < 0 {
				errs = append(errs, fmt.Errorf("--%s %q: %v", name, v, errOr(err, "want >= 0")))
			}
			return n
		}
		*c = shardcache.Config{Dir: *f.dir, DiskBytes: size("cache-bytes", *f.diskBytes),
			MemoryBytes: size("cache-memory-bytes", *f.memoryBytes), IdleHorizon: *f.horizon}
		if *f.horizon < time.Second || *f.horizon > 30*24*time.Hour {
			errs = append(errs, fmt.Errorf("--cache-idle-horizon %v: want 1s..720h0m0s", *f.horizon))
		}
		if len(errs) > 0 {
			return errors.Join(errs...) // a budget that did not parse is not also missing
		}
		if c.Dir != "" && c.DiskBytes == 0 {
			errs = append(errs, errors.New("--cache-dir without --cache-bytes: give the directory a budget"))
		}
		if c.Dir == "" && c.DiskBytes > 0 {
			errs = append(errs, errors.New("--cache-bytes without --cache-dir: name the directory"))
		}
		return errors.Join(errs...)
	}
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}
