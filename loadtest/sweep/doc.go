// Package sweep is `sluice loadtest sweep`: a bursty hyperparameter sweep
// run on one machine with real processes, once per scaling policy on the
// same work, and measured the way a platform team would judge it.
//
// Each run starts its own embedded NATS JetStream (the dataset sits in one
// embedded S3 for all runs), a `sluice controller` process with the local
// actuator (its replicas are `sluice fn serve` processes), and for every
// trial, at its arrival time, a `sluice agent` process and a simulated
// trainer in this process: it GETs batches from its agent and "computes"
// a fixed time per step, reporting its steps, wait and compute as the
// Python client does. Trials arrive spread over Options.Arrival.
//
// A run is a policy and a way to submit the trials:
//
//   - shared: the trials are one sweep (broker.SubmitSweep) submitted at the
//     first arrival; trials with the same seed share one job, a reader
//     each, so each chunk is preprocessed once for all of them.
//   - independent: each trial is its own job, submitted at its arrival,
//     as a platform without sharing runs a sweep.
//
// and one of the policies: sluice (its demand-driven policy, the jobs
// pre-warmed from the planner's estimate with a per-replica rate measured
// here first), keda (a KEDA ScaledObject on queue lag, emulated by the
// controller: --local-scaling keda), kpa (Knative's KPA emulated:
// --local-scaling kpa) and static N (N replicas per job from the start).
//
// Measured per run: each trainer's stall (time blocked waiting for a
// batch, from its arrival to its last batch: a cold start counts), time
// to first batch and completion time from arrival; the replicas' CPU
// seconds, read from /proc: the controller's cutime and cstime (the
// replicas it reaped, exactly) and its live children's own; the live
// replicas and stalled trainers over time (sampled every SampleEvery),
// drawn as SVG. Every trial's samples are checked:
// each (epoch, sample) exactly once.
package sweep
