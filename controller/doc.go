// Package controller is Sluice's control plane, what `sluice controller`
// runs: it watches the job store (wire.JobsBucket) and, for every job that
// is not finished, competes for the job's lease; the one controller that
// holds it moves the job from queued to running, has the shared
// autoscale.Runner size the job's replicas, writes the job's dispatch plan
// and its wire.JobStatus, and finishes the job: succeeded once every
// declared reader is through, or failed when no sample could be
// preprocessed at all. A finished, cancelled or deleted job releases its
// replicas, its dispatch plan, its task consumer and remaining tasks, its
// metric series and its lease.
//
// A job record is checked again whenever it is read (broker.CheckRecord:
// what Submit checks, but the pipeline, and the record's own fields), since
// anyone who may write the job store may have written it: one that fails
// is not run; its owner marks it failed with the reason (a run under way
// stops first). One that is not JSON is left alone. Both are counted
// (sluice_controller_invalid_job_records_total).
//
// With Options.CalloutIssuer every controller answers the NATS server's
// auth callout (callout.go, a queue group): an agent connecting as its
// job (wire.AgentNATSUser) with the password of the job's team key gets
// the agent's permissions narrowed to that job (natsperm.AgentFor);
// anything else is refused, logged and counted
// (sluice_controller_agent_logins_total).
//
// Run first creates (or updates) the streams and buckets; on a NATS
// cluster that cannot answer yet it retries with backoff and a Warn line
// per retry until its context ends, so controllers started together with
// their cluster wait for it rather than exit.
//
// The controller sends no task itself. A job's agents pull its tasks from
// the job's task consumer (wire.DispatchConsumer, created at submit), send
// them to the function replicas and receive the output. What the
// controller decides reaches them as the job's wire.DispatchPlan in
// wire.DispatchBucket, written on a tick whenever it changed: the
// replicas' endpoints (Actuator.Endpoints: each ready local replica, or
// one Knative Service URL, an actuator with a SharedEndpoint), how many
// tasks one endpoint takes (the replica concurrency; none for a shared
// endpoint), the job's in-flight budget (replicas x concurrency, the
// replicas being Options.Dispatch's, Knative's requested ones, or the
// actuator's ready ones) and each agent's share of it (shareInFlight: an
// equal split among the agents heard in the last demand-stale window).
//
// Ownership is a lease per job in wire.LeasesBucket, changed only by
// compare-and-set on the key's revision. DecideLease, a pure function of
// (lease, want, id, now, ttl), says what to do; the keeper does the KV I/O
// every ttl/3. An owner that cannot renew stops the job at Expires -
// ttl/5 by its own clock, before a standby may take the lease at Expires
// by its clock, so two controllers never run one job at once while their
// clocks agree within ttl/5. The job's agents go on with the plan they
// have meanwhile; a standby that takes the job writes its own.
//
// The controller is the one owner of the agents' demand signals
// (demandBook): it keeps each agent's latest for each reader, refusing
// undeclared readers and agents over MaxAgentsPerJob, merges a reader's
// team (one agent per node, each signalling for its own ranks: mergeTeam
// adds the rates and progress up, takes the most stalled, and calls the
// reader done only once every agent is), aggregates the readers
// (autoscale.Aggregate) and hands the autoscaler plain inputs each tick.
//
// The backlog the autoscaler reads is the task
// consumer's tasks not yet acked (pending and ack pending), read at most
// once a second, and the agents' tasks in flight and wanted, from their
// latest demand signals (wire.Demand.InFlight, PendingTasks); the job
// needs no replica once none is left (backlogOf). Progress comes from the
// agents' shard results (wire.ShardResult on wire.ResultSubject), one per
// task they settle, counted per distinct task (jobResults): tasks done and
// failed, samples, where shards were read from; results are core NATS, so
// a status also counts the tasks the consumer no longer holds as settled,
// and the final status counts as failed at least the tasks the agents
// recorded as given up (wire.ShardsFailedKey), whose results a takeover
// may have lost. A controller that takes a job over adds its counts to
// the status it found. Reader progress comes from the declared readers' demand signals
// (others' are refused; a status lists declared readers only), each
// reader's team merged;
// completion from each declared reader's wire.ReaderDoneKey, which its
// agent writes once every rank has the last batch. Nothing a result
// carries sizes a status: a failure is listed under its shard's key in
// the job's record, texts are cut to wire.MaxReasonBytes, and
// wire.MaxFailedShardsListed failures are listed, every one counted.
//
// Every LearnEvery (30 s) the controller records each running job's
// per-replica rate, as its autoscaling policy learned it, in the plan
// store (package planner, wire.PlansBucket) under the job's pipeline and
// dataset, weighted by the replica-seconds served since the last record;
// Plans exposes the store for pre-warm, and `sluice plan` reads it.
package controller
