// Package sweep is `sluice loadtest sweep`: a bursty hyperparameter sweep
// run on one machine with real processes, once per scaling policy on the
// same work, and measured the way a platform team would judge it.
//
// Each run starts its own embedded NATS JetStream (the dataset sits in one
// embedded S3 for all runs), a `sluice loadtest controller` process (the
// production controller, with flags that let a baseline of package
// autoscale/baseline size the replicas) with the local actuator (its replicas are `sluice fn serve` processes), one `sluice
// agent` process per job, started when the job's first trial arrives (it
// pulls the job's tasks, sends them to the replicas and receives their
// output), and for every trial, at its arrival time, a simulated trainer
// in this process: it GETs batches from its reader's API on the job's
// agent (/r/<trial>/v1/batch) and "computes" a fixed time per step,
// reporting its steps, wait and compute as the Python client does. Trials
// arrive spread over Options.Arrival.
//
// A run is a policy and a way to submit the trials:
//
//   - shared: the trials are one sweep (broker.SubmitSweep) submitted at the
//     first arrival; trials with the same seed share one job, a reader
//     each, served by the job's one agent, so each shard is preprocessed
//     once for all of them. A trial that lags holds the others back once
//     the agent's output buffer (the job's output_buffer_bytes) is full:
//     a shard's task is settled only once every reader took all of it.
//   - independent: each trial is its own job, submitted at its arrival,
//     as a platform without sharing runs a sweep.
//
// and one of the policies: sluice (its demand-driven policy, the jobs
// pre-warmed from the planner's estimate with a per-replica rate measured
// here first), keda (a KEDA ScaledObject on queue lag:
// loadtest controller --local-scaling keda), kpa (Knative's KPA:
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
