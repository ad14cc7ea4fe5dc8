package shardcache

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
)

type metrics struct {
	reads     *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	evictions *prometheus.CounterVec
	errors    *prometheus.CounterVec
	stale     prometheus.Counter
	degraded  prometheus.Gauge
	bypasses  *prometheus.CounterVec
	fillWaits *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cache_reads_total",
			Help: "Shard reads by outcome: hit_memory, hit_disk, miss (read from S3 and cached), bypass (read from S3, not cached), off (no cache).",
		}, []string{"outcome"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cache_read_bytes_total",
			Help: "Shard bytes read, by source: s3, memory, disk.",
		}, []string{"source"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cache_evictions_total",
			Help: "Cache entries evicted to make room, by tier (memory, disk).",
		}, []string{"tier"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cache_errors_total",
			Help: "Cache failures, each degraded to reading from S3, by operation (open, read, write, corrupt, lock).",
		}, []string{"op"}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_cache_stale_total",
			Help: "Cached shards found changed in S3 (another ETag), read again.",
		}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_cache_disk_degraded",
			Help: "1 when the cache directory could not be used and the disk tier is off.",
		}),
		bypasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cache_bypass_total",
			Help: "Shard reads a cache meant to cache did not keep, by reason: no_etag, no_room, no_directory, fill_wait.",
		}, []string{"reason"}),
		fillWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cache_fill_waits_total",
			Help: "Shard reads that waited for another read of the shard to fill the cache, by how the wait ended: hit (served from the entry), fallback (no entry came: read from S3), timeout (read from S3 after the bound), cancelled.",
		}, []string{"outcome"}),
	}
	for _, o := range []Outcome{OutcomeOff, OutcomeHitMemory, OutcomeHitDisk, OutcomeMiss, OutcomeBypass} {
		m.reads.WithLabelValues(string(o))
	}
	for _, s := range []string{"s3", "memory", "disk"} {
		m.bytes.WithLabelValues(s)
	}
	for _, b := range []Bypass{BypassNoETag, BypassNoRoom, BypassNoDirectory, BypassFillWait} {
		m.bypasses.WithLabelValues(string(b))
	}
	for _, o := range []fillOutcome{fillHit, fillFallback, fillTimeout, fillCancelled} {
		m.fillWaits.WithLabelValues(string(o))
	}
	m.reads = promreg.Register(reg, m.reads)
	m.bytes = promreg.Register(reg, m.bytes)
	m.evictions = promreg.Register(reg, m.evictions)
	m.errors = promreg.Register(reg, m.errors)
	m.stale = promreg.Register(reg, m.stale)
	m.degraded = promreg.Register(reg, m.degraded)
	m.bypasses = promreg.Register(reg, m.bypasses)
	m.fillWaits = promreg.Register(reg, m.fillWaits)
	return m
}
