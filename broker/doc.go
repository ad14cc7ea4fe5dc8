// Package broker turns a job into shard tasks and pushes them to function
// replicas. Submit lists the dataset's shards once, records the job and
// queues one ShardTask per shard per epoch on a JetStream work-queue stream,
// each epoch in its own seeded order. A Dispatcher pulls a job's tasks as
// replica capacity allows and sends each as a CloudEvent through a Target; a
// task is acked only once the function replied that every chunk is durably
// published, retried with backoff on transient errors and reported as failed,
// never dropped, on permanent ones.
package broker
