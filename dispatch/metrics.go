package dispatch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
)

// metrics are a Dispatcher's Prometheus series, labelled by job. Built
// again on the same registry (several dispatchers in one process) they
// share the series registered first.
type metrics struct {
	sends       *prometheus.CounterVec
	inflight    *prometheus.GaugeVec
	held        *prometheus.GaugeVec
	sendSeconds *prometheus.HistogramVec
	retries     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	job := []string{"job"}
	m := &metrics{
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_dispatch_sends_total",
			Help: "Shard task sends to function replicas, by outcome: ok, transient, malformed, busy, unauthorized, permanent, canceled.",
		}, []string{"job", "outcome"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_dispatch_inflight",
			Help: "Shard tasks with a send slot: being sent, or waiting to be sent again.",
		}, job),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_dispatch_held",
			Help: "Shard tasks received and not yet settled (sending, or their output not yet handed out).",
		}, job),
		sendSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_dispatch_send_seconds",
			Help:    "Time from posting a shard task to the end of its reply.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}, job),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_dispatch_retries_total",
			Help: "Sends of a shard task beyond its first by this agent.",
		}, job),
	}
	m.sends = promreg.Register(reg, m.sends)
	m.inflight = promreg.Register(reg, m.inflight)
	m.held = promreg.Register(reg, m.held)
	m.sendSeconds = promreg.Register(reg, m.sendSeconds)
	m.retries = promreg.Register(reg, m.retries)
	return m
}
