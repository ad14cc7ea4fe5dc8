// Package autoscale turns a job's demand signal (from its trainer agents)
// and its task backlog (its task queue and its agents' sends) into a
// replica count for its preprocessing functions, and applies it through an
// Actuator: local processes (package local) or pods of a Knative Service
// (package knative).
//
// The policy (Decide) is a pure function of (config, state, inputs, now):
//
//   - A job that is done goes to zero at once. A job with nothing pending
//     or in flight goes to MinReplicas at once: an idle replica has no task
//     to take.
//   - A job at zero with tasks pending activates with InitialReplicas, or
//     the job's own (Job.InitialReplicas: a sweep's job pre-warmed with
//     what the planner says it needs, before any demand signal).
//   - Without a demand signal fresher than DemandStale the count holds: the
//     agent may not have started, or the signal path is broken, and
//     neither is a reason to move.
//   - With demand: the trainer's unstalled appetite is
//     D = ConsumedPerS / max(1-StallFraction, 0.1), and one replica's
//     throughput r is learned (a moving average) from ArrivedPerS / ready
//     replicas, but only while the agent's buffer is below 75%: a full
//     buffer throttles arrivals and would make replicas look slow. Samples
//     arriving while none is reported ready count one as serving: Knative
//     routes to a pod seconds before its kubelet reports it ready.
//   - Stall above TargetStall: want ceil(Headroom * D / r), at least the
//     current count. While r is unknown, or the trainer is starved (D = 0),
//     add one replica per decision, unless replicas are still starting: a
//     cold start stalls the trainer, and adding replicas then only
//     overshoots.
//   - Stall at or below target with the buffer 75% full or more: the job
//     is over-supplied; want the smaller count that still covers D.
//   - Otherwise hold.
//   - Scale-ups are limited per decision to max(2x, +MaxStepUp), to
//     MaxReplicas, and to pending+in-flight tasks (more replicas than
//     tasks would idle). While tasks remain the count stays at or above
//     max(MinReplicas, 1).
//   - Scale-downs go only as low as the highest count wanted within the
//     last ScaleDownDelay (Knative's scale-down window), so a dip in the
//     signal does not shed replicas that are needed a second later.
//
// Each job decides within its own bounds (Config.ForJob: the spec's
// min/max replicas, the controller's cap when it sets none). A job with
// several readers has a signal from each; Aggregate picks the one that
// drives it: the most stalled reader (the output stays until every reader
// took it), and the job's demand is done once every declared reader is.
// Its step times (where the trainers' steps go: data wait, compute, other)
// are every fresh reader's merged (MergeSteps), for the job's status.
//
// The cluster capacity is then shared between jobs; every job gets what it
// wants if that fits. Otherwise, by default (Config.Allocator "marginal"),
// AllocateMarginal gives each next replica to the job whose trainer gains
// most from it: a job's trainer needs Appetite/PerReplica replicas to run
// at full speed (the policy's learned rate and D), so one replica is worth
// weight/need of its speed until that need is covered and nothing after;
// replicas nobody gains from still go where wanted. Every job keeps half
// its fair grant (at least one replica where the fair split gives one),
// and one starved for 10 s gets a replica before anyone's gain. Since each
// trainer's gain is concave in its replicas the greedy fill never makes
// less total trainer progress than the fair split (property-tested). A
// replica a job holds counts 1.25x (a moved replica idles through its
// cold start) while that still beats the fair split, and a trainer
// stalled over 90% keeps the appetite read before (NextAppetite): its
// signal only bounds it from below, and reading it as its appetite made
// replicas swing between starved jobs in the trace simulation.
// Allocate, the fair split ("fair"), is weighted max-min: capacity in
// proportion to weight, what small jobs leave over going to the others,
// and the rounding's remainder one unit at a time to the job lowest per
// weight (ties in name order).
//
// Round is one decision round over all jobs, as a pure function of the
// jobs' configs, states and inputs, the capacity and the time: Decide per
// job, the bids, the allocator's grants, each decision cut to its grant,
// and the zero-since state the starvation rule reads. Runner.Tick and the
// trace simulator (loadtest/trace) both run it, so the simulator predicts
// what the controller decides; the caller chooses what the allocator
// counts as a job's current replicas (the runner its ready ones, the
// simulator its grant) and may reuse a settled job's bid (RoundJob.Settled).
// Round is Sluice's Policy (SluicePolicy); a baseline (package
// autoscale/baseline: Knative's KPA, KEDA's queue-lag scaler) is another,
// given to the runner with UsePolicy to compare them on the same work.
//
// Runner is the thin loop around all three, as Knative's MultiScaler is
// around its deciders: each Tick brings every job's Inputs (its demand,
// aggregated by the caller, and its backlog: the controller owns the
// agents' signals and the task counts), and the runner decides,
// allocates, calls Actuator.Scale for every job on every tick (so the
// actuator can replace replicas that died; removed and shrinking jobs
// first, so that the replicas never exceed the capacity between two calls)
// and records scale events. A removed job is scaled to zero and its series
// deleted. An actuator that must act only when a job starts and ends
// (Knative's, whose Service template changes make Revisions) implements
// JobLifecycle: the runner calls StartJob before a job's first Scale and
// EndJob after a removed job's last.
package autoscale
