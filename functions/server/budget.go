package server

import (
	"log/slog"

	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/internal/bytesize"
)

// decodeBudget sizes the replica's decode budget from its memory limit
// less what the shard cache's memory tier may hold (image.BudgetFor).
// A cache tier that would leave less than a quarter of the limit is
// misconfigured; the budget then takes its share of that quarter, so
// that images can still be decoded, and says so.
func decodeBudget(cfg Config, log *slog.Logger) *image.Budget {
	rest := cfg.MemoryLimit - cfg.Cache.MemoryBytes
	if rest < cfg.MemoryLimit/4 {
		log.Warn("the shard cache's memory tier leaves too little of the memory limit for decoding: lower --cache-memory-bytes or raise --memory-limit",
			"memory_limit", bytesize.Format(cfg.MemoryLimit), "cache_memory", bytesize.Format(cfg.Cache.MemoryBytes))
		rest = cfg.MemoryLimit / 4
	}
	b := image.BudgetFor(rest)
	log.Info("decode budget", "bytes", bytesize.Format(b.Total()), "memory_limit", bytesize.Format(cfg.MemoryLimit),
		"cache_memory", bytesize.Format(cfg.Cache.MemoryBytes))
	return b
}
