package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
)

// metrics are the controller's own series. None is labelled by job, so
// nothing is left behind when a job ends; the per-job series live with the
// dispatcher, the autoscaler and the actuator, and go with the job.
type metrics struct {
	owned     prometheus.Gauge
	leaseOps  *prometheus.CounterVec
	finished  *prometheus.CounterVec
	lost      prometheus.Counter
	tick      prometheus.Histogram
	statusErr prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		owned: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_controller_jobs_owned", Help: "Jobs whose lease this controller holds and runs.",
		})),
		leaseOps: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_lease_operations_total",
			Help: "Lease writes by operation (create, takeover, renew, release) and result (ok, conflict, error).",
		}, []string{"op", "result"})),
		finished: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_jobs_finished_total", Help: "Jobs this controller finished, by final state.",
		}, []string{"state"})),
		lost: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_controller_leases_lost_total", Help: "Jobs stopped because their lease could not be renewed or was taken.",
		})),
		tick: promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_controller_tick_seconds", Help: "Time of one control tick: autoscaling and status writes of every job.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		})),
		statusErr: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_controller_status_write_errors_total", Help: "Failed writes of a job's status.",
		})),
	}
}
