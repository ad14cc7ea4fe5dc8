// Package streams is the one definition of the JetStream streams, key-value
// buckets and consumers Sluice uses: the task work queue, each job's output
// stream, the job, status, lease and reader buckets, and the dispatcher's and
// readers' consumers. The product and the tests create them only through
// here, so a test exercises the limits (an output buffer that fills, a
// duplicate window) that production runs with.
package streams
