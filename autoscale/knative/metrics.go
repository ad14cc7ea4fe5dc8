package knative

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
)

type metrics struct {
	requested  *prometheus.GaugeVec
	ready      prometheus.Gauge
	revisions  prometheus.Gauge
	patches    prometheus.Counter
	syncErrors prometheus.Counter
	wakes      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requested: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_knative_requested_replicas", Help: "Replicas a job requested: its agents keep this times the replica concurrency in flight.",
		}, []string{"job"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_knative_ready_replicas", Help: "Ready pods of the function Service, over its Revisions.",
		}),
		revisions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_knative_revisions", Help: "Revisions of the function Service.",
		}),
		patches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_knative_template_patches_total", Help: "Changes of the function Service's scale bounds (each makes a Revision).",
		}),
		syncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_knative_sync_errors_total", Help: "Failed reads of the function Service or its Revisions.",
		}),
	}
	m.wakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_knative_wakes_total", Help: "Requests sent to the function Service at zero pods when a job first asked for replicas, by outcome (answered, failed): the cold start begins before the job's agents send.",
	}, []string{"outcome"})
	m.wakes = promreg.Register(reg, m.wakes)
	m.requested = promreg.Register(reg, m.requested)
	m.ready = promreg.Register(reg, m.ready)
	m.revisions = promreg.Register(reg, m.revisions)
	m.patches = promreg.Register(reg, m.patches)
	m.syncErrors = promreg.Register(reg, m.syncErrors)
	return m
}
