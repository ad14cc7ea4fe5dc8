// Package controller is Sluice's control plane, what `sluice controller`
// runs: it watches the job store (wire.JobsBucket) and, for every job that
// is not finished, competes for the job's lease; the one controller that
// holds it moves the job from queued to running, runs the job's
// broker.Dispatcher, has the shared autoscale.Runner size the job's
// replicas, writes the job's wire.JobStatus about once a second, and
// finishes the job: succeeded once every task is settled and every
// declared reader has taken every chunk, or failed when no sample could be
// preprocessed at all. A finished, cancelled or deleted job releases its
// replicas, its consumers and output stream, its metric series and its
// lease.
//
// Ownership is a lease per job in wire.LeasesBucket, changed only by
// compare-and-set on the key's revision. DecideLease, a pure function of
// (lease, want, id, now, ttl), says what to do; the keeper does the KV I/O
// every ttl/3. An owner that cannot renew stops the job at Expires -
// ttl/5 by its own clock, before a standby may take the lease at Expires
// by its clock, so two controllers never dispatch one job at once while
// their clocks agree within ttl/5. A standby resumes the job on its
// durable dispatch consumer; tasks the old owner had in flight come back
// after the consumer's AckWait.
//
// The backlog the autoscaler reads is the dispatcher's own count of the
// job's tasks (pending, in flight, settled), not JetStream consumer info:
// the owner has it in memory, it counts distinct tasks (a task waiting out
// a retry delay is pending, a stray message is not), and 200 jobs cost no
// request per tick. Reader progress comes from the readers' demand
// signals; completion reads the readers' consumers, the one place that
// knows every chunk was taken.
//
// Every LearnEvery (30 s) the controller records each running job's
// per-replica rate, as its autoscaling policy learned it, in the plan
// store (package planner, wire.PlansBucket) under the job's pipeline and
// dataset, weighted by the replica-seconds served since the last record;
// Plans exposes the store for pre-warm, and `sluice plan` reads it.
package controller
