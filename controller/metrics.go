package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/promreg"
	"github.com/sluice-project/sluice/wire"
)

// metrics are the controller's own series. None is labelled by job, so
// nothing is left behind when a job ends; the per-job series are
// jobMetrics', the autoscaler's and the actuator's, and go with the job.
type metrics struct {
	owned     prometheus.Gauge
	leaseOps  *prometheus.CounterVec
	finished  *prometheus.CounterVec
	lost      prometheus.Counter
	tick      prometheus.Histogram
	statusErr prometheus.Counter
	planErr   prometheus.Counter
	results   *prometheus.CounterVec
	// invalidRecords counts job records read that fail broker.CheckRecord.
	invalidRecords prometheus.Counter
	// refused counts demand signals not kept, by reason.
	refused *prometheus.CounterVec
	// agentLogins counts the auth callouts answered, by result:
	// accepted, or why refused.
	agentLogins *prometheus.CounterVec
	// sealRefused counts the agents' records refused for their node seal.
	sealRefused *prometheus.CounterVec
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
			Name: "sluice_controller_tick_seconds", Help: "Time of one control tick: autoscaling, dispatch plans and status writes of every job.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		})),
		statusErr: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_controller_status_write_errors_total", Help: "Failed writes of a job's status.",
		})),
		planErr: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_controller_plan_write_errors_total", Help: "Failed writes of a job's dispatch plan.",
		})),
		results: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_shard_results_total",
			Help: "Shard results received from agents, by what became of them: counted, ignored (a job not run here, or a task counted already), malformed.",
		}, []string{"result"})),
		invalidRecords: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_controller_invalid_job_records_total",
			Help: "Job records read that are not valid (undecodable, or failing the submit checks): not run, marked failed where decodable.",
		})),
		refused: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_autoscale_demand_refused_total",
			Help: "Demand signals refused: of a reader the job does not declare, naming an agent over the bounds, with a count out of bounds, " +
				"not sealed by a node the job's key certifies (node_seal), or naming an agent other than the node that sealed it (other_node).",
		}, []string{"reason"})),
		agentLogins: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_agent_logins_total",
			Help: "Agents' NATS logins the controller answered (the server's auth callout), by result: accepted, or why refused " +
				"(not_agent_user, no_job, no_credential, wrong_password, lookup_error, bad_request).",
		}, []string{"result"})),
		sealRefused: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_node_refused_total",
			Help: "Agents' records refused for their node seal (not sealed by a node the job's key certifies), by record: done_record.",
		}, []string{"reason"})),
	}
}

// jobMetrics are the per-job series of the jobs this controller runs, from
// their agents' shard results and their dispatch plans. DeleteJob removes a
// job's once it ends.
type jobMetrics struct {
	done       *prometheus.CounterVec
	failed     *prometheus.CounterVec
	replays    *prometheus.CounterVec
	shardReads *prometheus.CounterVec
	readBytes  *prometheus.CounterVec
	inflight   *prometheus.GaugeVec
	// From the status each tick writes: what the job's dashboard and
	// alerts read, for a Knative and a local actuator alike.
	tasks        *prometheus.GaugeVec
	ready        *prometheus.GaugeVec
	redeliveries *prometheus.GaugeVec
}

func newJobMetrics(reg prometheus.Registerer) *jobMetrics {
	job := []string{"job"}
	return &jobMetrics{
		done: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_tasks_done_total",
			Help: "Shard tasks of the job its agents reported done (distinct tasks).",
		}, job)),
		failed: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_tasks_failed_total",
			Help: "Shard tasks of the job its agents gave up on: permanent error or too many failed sends.",
		}, job)),
		replays: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_replays_total",
			Help: "Shards produced again for a reader resumed from a checkpoint, done or failed.",
		}, job)),
		shardReads: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_shard_reads_total",
			Help: "Shards functions read for the job, by where from: hit_memory, hit_disk (the replica's shard cache), miss (S3, cached), bypass (S3, not cached), off (S3, no cache).",
		}, []string{"job", "outcome"})),
		readBytes: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controller_shard_read_bytes_total",
			Help: "Shard bytes functions read for the job, by source: s3 or cache.",
		}, []string{"job", "source"})),
		inflight: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_controller_dispatch_inflight",
			Help: "Tasks the job's agents may have in flight together, as its dispatch plan last said.",
		}, job)),
		tasks: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_controller_job_tasks",
			Help: "The job's shard tasks by state, as its status last said: total (shards x epochs), done, failed, " +
				"pending (queued, not yet taken) and in_flight (taken by an agent, not yet acked): pending and in_flight are its backlog.",
		}, []string{"job", "state"})),
		ready: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_controller_job_ready_replicas",
			Help: "The job's function replicas ready to take tasks, as its status last said.",
		}, job)),
		// A gauge: the status counts over every controller that ran the
		// job, so a takeover does not start it again from zero.
		redeliveries: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_controller_job_redeliveries",
			Help: "Sends of the job's tasks beyond their first so far (agents' retries, and tasks done again after an agent died before its ack), as its status counts them.",
		}, job)),
	}
}

// observe sets the series that follow the job's status s.
func (m *jobMetrics) observe(s wire.JobStatus) {
	t := s.Tasks
	for state, n := range map[string]int{
		"total": t.Total, "done": t.Done, "failed": t.Failed, "pending": t.Pending, "in_flight": t.InFlight,
	} {
		m.tasks.WithLabelValues(s.Job, state).Set(float64(n))
	}
	m.ready.WithLabelValues(s.Job).Set(float64(s.ReadyReplicas))
	m.redeliveries.WithLabelValues(s.Job).Set(float64(t.Redeliveries))
}

// DeleteJob removes every series of job.
func (m *jobMetrics) DeleteJob(job string) {
	l := prometheus.Labels{"job": job}
	m.done.DeletePartialMatch(l)
	m.failed.DeletePartialMatch(l)
	m.replays.DeletePartialMatch(l)
	m.shardReads.DeletePartialMatch(l)
	m.readBytes.DeletePartialMatch(l)
	m.inflight.DeletePartialMatch(l)
	m.tasks.DeletePartialMatch(l)
	m.ready.DeletePartialMatch(l)
	m.redeliveries.DeletePartialMatch(l)
}
