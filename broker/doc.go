// Package broker turns a job into shard tasks and pushes them to function
// replicas, and is the Go API of job control another program imports.
//
// A Broker submits, lists, watches, cancels and deletes jobs, all through
// JetStream, with no controller needed. ParseJobSpec reads a job spec file
// (YAML or JSON) and CheckJobSpec checks a spec built in Go; both report
// every problem at once as a *SpecError, a file's with their lines. Submit
// checks the spec and its pipeline, lists the dataset's shards once,
// creates the output stream with one consumer per reader, records the job
// (queued) and queues one ShardTask per shard per epoch on a work-queue
// stream, each epoch in its own seeded order; a refused or failed Submit
// leaves nothing behind. Transition changes a job's state by
// compare-and-set; Cancel stops a job and Release removes its tasks,
// consumers and output stream; Delete removes everything of a finished job
// (a running one only with force). Status and Watch read the live status
// the owning controller writes.
//
// A Dispatcher pulls a job's tasks as replica capacity allows and sends
// each as a CloudEvent through a Target; a task is acked only once the
// function replied that every chunk is durably published, retried with
// backoff on transient errors and reported as failed, never dropped, on
// permanent ones. NewLocalityTarget sends each shard to its home replica,
// the first in the shard key's rendezvous order over the ready replicas
// (whose shard cache holds it), waiting a bounded time when it is busy.
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
// demand signal. MinReplicasPlanner (the job's min_replicas) is the
// default; RatePlanner is the FastFlow-style ceil(trainer rate /
// per-replica rate) from a measured rate. The sweep's record
// (wire.Sweep, in wire.SweepsBucket) names its jobs and their trials for
// Sweep (`sluice sweep status`).
//
// Replay queues the re-production of shards for one reader (a trainer
// resumed from a checkpoint); their chunks go to that reader's own
// subject (wire.ReaderReplaySubject), so the job's other readers never
// see them.
package broker
