package broker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
)

// Metrics are the dispatchers' Prometheus series, labelled by job. Build one
// per registry and share it between the dispatchers of all jobs.
type Metrics struct {
	tasks         *prometheus.GaugeVec
	done          *prometheus.CounterVec
	failed        *prometheus.CounterVec
	epochDone     *prometheus.GaugeVec
	inflight      *prometheus.GaugeVec
	capacity      *prometheus.GaugeVec
	outputBacklog *prometheus.GaugeVec
	redeliveries  *prometheus.CounterVec
	sendErrors    *prometheus.CounterVec
	sendSeconds   *prometheus.HistogramVec
	shardReads    *prometheus.CounterVec
	readBytes     *prometheus.CounterVec
}

// NewMetrics builds the series and registers them with reg; nil reg leaves
// them unregistered. Calling it again on the same registry shares the
// series registered first.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	job := []string{"job"}
	m := &Metrics{
		tasks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_broker_tasks",
			Help: "Shard tasks of the job over all epochs.",
		}, job),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_broker_tasks_done_total",
			Help: "Shard tasks the function finished and the dispatcher acked (distinct tasks).",
		}, job),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_broker_tasks_failed_total",
			Help: "Shard tasks given up on: permanent error or too many deliveries.",
		}, job),
		epochDone: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_broker_epoch_tasks_done",
			Help: "Shard tasks done per epoch (of len(shards) each).",
		}, []string{"job", "epoch"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_broker_tasks_inflight",
			Help: "Shard tasks being sent to functions now.",
		}, job),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_broker_capacity",
			Help: "Tasks the replicas can take at once, as last polled.",
		}, job),
		outputBacklog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_broker_output_backlog_bytes",
			Help: "Bytes in the job's output stream not yet taken by the trainer agent; dispatch pauses at 3/4 of its cap.",
		}, job),
		redeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_broker_task_redeliveries_total",
			Help: "Sends of a task beyond its first delivery.",
		}, job),
		sendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_broker_send_errors_total",
			Help: "Failed sends, by kind (transient or permanent).",
		}, []string{"job", "kind"}),
		sendSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_broker_send_seconds",
			Help:    "Time from sending a task to the function's reply.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}, job),
		shardReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_broker_shard_reads_total",
			Help: "Shards of done tasks by where the function read them: hit_memory, hit_disk (its shard cache), miss (S3, cached), bypass (S3, not cached), off (S3, no cache).",
		}, []string{"job", "outcome"}),
		readBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_broker_shard_read_bytes_total",
			Help: "Shard bytes done tasks read, by source: s3 or cache.",
		}, []string{"job", "source"}),
	}
	m.tasks = promreg.Register(reg, m.tasks)
	m.done = promreg.Register(reg, m.done)
	m.failed = promreg.Register(reg, m.failed)
	m.epochDone = promreg.Register(reg, m.epochDone)
	m.inflight = promreg.Register(reg, m.inflight)
	m.capacity = promreg.Register(reg, m.capacity)
	m.outputBacklog = promreg.Register(reg, m.outputBacklog)
	m.redeliveries = promreg.Register(reg, m.redeliveries)
	m.sendErrors = promreg.Register(reg, m.sendErrors)
	m.sendSeconds = promreg.Register(reg, m.sendSeconds)
	m.shardReads = promreg.Register(reg, m.shardReads)
	m.readBytes = promreg.Register(reg, m.readBytes)
	return m
}

// DeleteJob removes every series of job; call it once the job's
// dispatcher has returned.
func (m *Metrics) DeleteJob(job string) {
	l := prometheus.Labels{"job": job}
	m.tasks.DeletePartialMatch(l)
	m.done.DeletePartialMatch(l)
	m.failed.DeletePartialMatch(l)
	m.epochDone.DeletePartialMatch(l)
	m.inflight.DeletePartialMatch(l)
	m.capacity.DeletePartialMatch(l)
	m.outputBacklog.DeletePartialMatch(l)
	m.redeliveries.DeletePartialMatch(l)
	m.sendErrors.DeletePartialMatch(l)
	m.sendSeconds.DeletePartialMatch(l)
	m.shardReads.DeletePartialMatch(l)
	m.readBytes.DeletePartialMatch(l)
}

func epochLabel(epoch int) string { return strconv.Itoa(epoch) }
