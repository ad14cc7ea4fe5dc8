package traineragent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/traineragent/internal/demand"
)

// Metrics are the agent's Prometheus series, labelled by job and reader.
type Metrics struct {
	samplesArrived   *prometheus.CounterVec
	samplesDelivered *prometheus.CounterVec
	batchesDelivered *prometheus.CounterVec
	duplicateChunks  *prometheus.CounterVec
	failedSamples    *prometheus.CounterVec
	droppedSamples   *prometheus.CounterVec
	stallSeconds     *prometheus.CounterVec
	bufferedSamples  *prometheus.GaugeVec
	heldBytes        *prometheus.GaugeVec
	stallFraction    *prometheus.GaugeVec
	positionBytes    *prometheus.GaugeVec
	gpuUtilization   *prometheus.GaugeVec
	steps            *prometheus.CounterVec
	stepSeconds      *prometheus.CounterVec
	teamRefused      prometheus.Counter
	nodeRefused      *prometheus.CounterVec
}

// NewMetrics creates the agent's series and registers them with reg unless
// reg is nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	job := []string{"job", "reader"}
	m := &Metrics{
		samplesArrived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_samples_arrived_total", Help: "Samples received from functions.",
		}, job),
		samplesDelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_samples_delivered_total", Help: "Samples handed to the trainer.",
		}, job),
		batchesDelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_batches_delivered_total", Help: "Batches handed to the trainer.",
		}, job),
		duplicateChunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_duplicate_chunks_total", Help: "Output messages dropped as already seen.",
		}, job),
		failedSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_failed_samples_total", Help: "Samples reported as failed.",
		}, job),
		droppedSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_dropped_samples_total", Help: "Samples of epochs' partial last steps left out by drop_last.",
		}, job),
		stallSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_stall_seconds_total", Help: "Time the trainer spent waiting for a batch.",
		}, job),
		bufferedSamples: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_agent_buffered_samples", Help: "Samples held by the agent (ready batches and partial batches).",
		}, job),
		heldBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_agent_held_bytes", Help: "Bytes of output chunks the reader holds (received, not every row handed out): what the job's output buffer bounds.",
		}, job),
		stallFraction: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_agent_stall_fraction", Help: "Share of the last demand interval the trainer waited for data.",
		}, job),
		positionBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_agent_position_bytes", Help: "Size of the reader's last recorded position.",
		}, job),
		gpuUtilization: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_agent_gpu_utilization", Help: "Mean GPU utilisation over the last demand interval, -1 when no GPU is read.",
		}, job),
		// Per rank: a world is tens to hundreds of ranks, and the rank
		// fed last is the one that holds up a DDP step.
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_steps_total", Help: "Training steps the trainer's clients reported.",
		}, []string{"job", "reader", "rank"}),
		stepSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_agent_step_seconds_total",
			Help: "Time of the reported steps by part: wait (for data), compute (client compute time the GPU was busy), other (the rest).",
		}, []string{"job", "reader", "rank", "part"}),
		teamRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_agent_team_refused_total",
			Help: "Team messages refused: not sealed by a node of the job, a request naming another node than its sealer's, no session of the member it names, a copy, a join under a live member's name, a forged reply.",
		}),
	}
	m.nodeRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_agent_node_refused_total",
		Help: "Team messages and reader records refused for their node seal, by reason: " +
			"team_seal (not sealed by a node the job's key certifies), team_other_node (a request naming another node than its sealer's), " +
			"reply_other_node (a reply not sealed by the node that answered the join), record_seal, record_copy (a reader's earlier record put back).",
	}, []string{"reason"})
	if reg != nil {
		reg.MustRegister(m.teamRefused, m.nodeRefused)
		reg.MustRegister(m.samplesArrived, m.samplesDelivered, m.batchesDelivered, m.duplicateChunks,
			m.failedSamples, m.droppedSamples, m.stallSeconds, m.bufferedSamples, m.heldBytes, m.stallFraction, m.positionBytes,
			m.gpuUtilization, m.steps, m.stepSeconds)
	}
	return m
}

// jobMetrics are the series of one job.
type jobMetrics struct {
	samplesArrived, samplesDelivered, batchesDelivered prometheus.Counter
	duplicateChunks, failedSamples, stallSeconds       prometheus.Counter
	droppedSamples                                     prometheus.Counter
	bufferedSamples, stallFraction, positionBytes      prometheus.Gauge
	heldBytes                                          prometheus.Gauge
	gpuUtilization                                     prometheus.Gauge
	steps                                              *prometheus.CounterVec // by rank
	stepSeconds                                        *prometheus.CounterVec // by rank and part
	teamRefused                                        prometheus.Counter
	nodeRefused                                        *prometheus.CounterVec
}

func (m *Metrics) forJob(job, reader string) jobMetrics {
	return jobMetrics{
		samplesArrived:   m.samplesArrived.WithLabelValues(job, reader),
		samplesDelivered: m.samplesDelivered.WithLabelValues(job, reader),
		batchesDelivered: m.batchesDelivered.WithLabelValues(job, reader),
		duplicateChunks:  m.duplicateChunks.WithLabelValues(job, reader),
		failedSamples:    m.failedSamples.WithLabelValues(job, reader),
		droppedSamples:   m.droppedSamples.WithLabelValues(job, reader),
		stallSeconds:     m.stallSeconds.WithLabelValues(job, reader),
		bufferedSamples:  m.bufferedSamples.WithLabelValues(job, reader),
		heldBytes:        m.heldBytes.WithLabelValues(job, reader),
		stallFraction:    m.stallFraction.WithLabelValues(job, reader),
		positionBytes:    m.positionBytes.WithLabelValues(job, reader),
		gpuUtilization:   m.gpuUtilization.WithLabelValues(job, reader),
		steps:            m.steps.MustCurryWith(prometheus.Labels{"job": job, "reader": reader}),
		stepSeconds:      m.stepSeconds.MustCurryWith(prometheus.Labels{"job": job, "reader": reader}),
		teamRefused:      m.teamRefused,
		nodeRefused:      m.nodeRefused,
	}
}

// countSteps adds a closed window's split to the step series.
func (m jobMetrics) countSteps(perRank map[int]demand.StepParts) {
	for rank, p := range perRank {
		r := strconv.Itoa(rank)
		m.steps.WithLabelValues(r).Add(float64(p.Steps))
		m.stepSeconds.WithLabelValues(r, "wait").Add(p.WaitS)
		m.stepSeconds.WithLabelValues(r, "compute").Add(p.ComputeS)
		m.stepSeconds.WithLabelValues(r, "other").Add(p.OtherS)
	}
}
