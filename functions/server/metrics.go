package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Shard outcomes, the label values of sluice_function_shards_total.
const (
	outcomeOK        = "ok"
	outcomeInvalid   = "invalid"
	outcomeNotFound  = "not_found"
	outcomeAbandoned = "abandoned" // the client went away mid-shard
	outcomeError     = "error"
)

type metrics struct {
	shards   *prometheus.CounterVec
	rejected *prometheus.CounterVec
	samples  prometheus.Counter
	failed   prometheus.Counter
	chunks   prometheus.Counter
	bytes    prometheus.Counter
	duration prometheus.Histogram
	inFlight prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		shards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_function_shards_total",
			Help: "Shard tasks processed, by outcome (ok, invalid, not_found, abandoned, error).",
		}, []string{"outcome"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_function_requests_rejected_total",
			Help: "Task requests turned away before processing, by reason (busy, draining, too_large, timeout, bad_event, unsupported_media_type).",
		}, []string{"reason"}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_function_samples_total",
			Help: "Samples preprocessed, in shards sent to the end.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_function_samples_failed_total",
			Help: "Samples that could not be read or preprocessed (reported as failed samples).",
		}),
		chunks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_function_chunks_sent_total",
			Help: "Output chunks sent (of unfinished shards too).",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_function_chunk_bytes_total",
			Help: "Bytes of output chunks sent.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_function_shard_duration_seconds",
			Help:    "Time to process one shard task, from request to the end of its output.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12), // 50ms .. ~100s
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_function_shards_in_flight",
			Help: "Shard tasks being processed now.",
		}),
	}
	m.rejected.WithLabelValues("busy")
	m.rejected.WithLabelValues("draining")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.shards, m.rejected, m.samples, m.failed, m.chunks, m.bytes, m.duration, m.inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering function metrics: %w", err)
		}
	}
	return m, nil
}
