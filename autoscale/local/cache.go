package local

import (
	"strconv"

	"github.com/sluice-project/sluice/functions/shardcache"
)

// WithCache adds the shard cache settings to the replica command line. The
// replicas of one machine share c.Dir, as replicas of one node share a
// node's cache directory, and c.DiskBytes is its budget for all of them;
// c.MemoryBytes is each replica's. Options without a Command are returned
// as they are.
func (o Options) WithCache(c shardcache.Config) Options {
	if len(o.Command) == 0 || (c.Dir == "" && c.MemoryBytes == 0) {
		return o
	}
	o.Command = append(append([]string{}, o.Command...),
		"--cache-dir", c.Dir,
		"--cache-bytes", strconv.FormatInt(c.DiskBytes, 10),
		"--cache-memory-bytes", strconv.FormatInt(c.MemoryBytes, 10))
	if c.IdleHorizon > 0 {
		o.Command = append(o.Command, "--cache-idle-horizon", c.IdleHorizon.String())
	}
	return o
}
