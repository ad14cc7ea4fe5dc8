// Package streams is the one definition of the JetStream streams, key-value
// buckets and consumers Sluice uses: the task work queue, the job, status,
// lease, reader, sweep, plan and dispatch-plan buckets, and each job's task
// consumer, which the job's agents share. The product and the tests create
// them only through here, so a test exercises the limits (a duplicate
// window, an ack wait) that production runs with.
package streams
