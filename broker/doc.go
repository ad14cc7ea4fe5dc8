// Package broker turns a job into shard tasks on a work queue, and is the
// Go API of job control another program imports.
//
// A Broker submits, lists, watches, cancels and deletes jobs, all through
// JetStream, with no controller needed. Submit checks the spec with the
// SpecCheck it is given (WithSpecCheck: jobspec.Check, the fields and the
// pipeline, every problem at once; without one the fields only, as
// CheckRecord), lists the dataset's shards once, records the job
// (queued), creates the job's task consumer (the durable queue
// wire.DispatchConsumer that every agent of the job pulls from, so the
// tasks are held from the start) and queues one ShardTask per shard per
// epoch (wire.Job.Task) on a work-queue stream, each epoch in its own
// seeded order; a refused or failed Submit leaves nothing behind.
// Transition changes a job's state by compare-and-set; Cancel stops a job
// and Release removes its task consumer, its remaining tasks and its
// dispatch plan (wire.DispatchBucket); Delete removes everything of a
// finished job (a running one only with force). Status and Watch read the
// live status the owning controller writes. The streams and buckets are
// opened on first use, created if missing; a NATS cluster that cannot
// answer yet (still forming: no meta leader, too few peers) is waited for
// with backoff and a Warn line per retry (internal/retry).
//
// The broker imports no function code (no functions/... package): job
// spec files and the pipeline check are package jobspec's, so the agent
// and the controller, which import the broker, link no image, text or
// tabular code.
//
// The broker sends nothing to functions: a job's agents pull its tasks,
// send them to the function replicas its owning controller names in the
// job's dispatch plan, and receive the output themselves (package
// dispatch).
//
// Sweeps: SubmitSweep submits a hyperparameter sweep's trials as jobs.
// Trials that would be fed the same samples (same dataset, pipeline, seed
// and epochs: wire.SweepSpec.Jobs) share one job, each trial one of its
// readers, so each chunk is preprocessed once and every trial reads it at
// its own pace; a trial with another seed or pipeline gets a job of its
// own. Matching on exactly these four, not on a hash of the output, keeps
// the rule one a user can predict from the sweep file. Each job is
// pre-warmed: a Planner says how many replicas it needs for one trial's
// trainer rate (the trials of a job share its output, so not their sum)
// and the job starts with them (wire.JobSpec.InitialReplicas) before any
// demand signal. Without one a job starts with its min_replicas; the
// planners are package planner's (ByRate: the FastFlow-style ceil(trainer
// rate / per-replica rate) from a measured rate). The sweep's record
// (wire.Sweep, in wire.SweepsBucket) names its jobs and their trials for
// Sweep (`sluice sweep status`).
package broker
