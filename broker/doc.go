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
package broker
