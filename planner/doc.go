// Package planner keeps what Sluice has learned about a pipeline's
// throughput, so that a job's replicas can be sized before its first
// demand signal: `sluice plan --trainer-rate` answers with it, and
// pre-warm starts that many replicas when a job (or a sweep) arrives.
//
// The figure is one replica's throughput in samples/s, per pipeline and
// per (pipeline, dataset): decode cost depends on the images as much as
// on the ops. Controllers record it (Store.Record) from running jobs every
// 30 s: the rate the job's autoscaling policy learned (arrived samples/s
// over serving replicas, measured only while the trainer agent's buffer
// does not throttle arrivals), weighted by the replica-seconds it covers.
// A record folds an observation into the kept rate as an exponentially
// weighted moving average over replica-seconds (Learn): weight
// 1 - 2^(-replica-seconds / HalfLife), so 10 replica-minutes of new
// evidence count as much as all the older, and a pipeline that got faster
// (a new build, other images) is followed within a few jobs.
//
// ReplicasFor is FastFlow's and tf.data service's estimate:
// ceil(trainer rate / per-replica rate). It leaves headroom to the
// autoscaling policy, which corrects the count once demand arrives.
//
// The sweep planners (broker.Planner) are here too: ByRate sizes a job by
// ReplicasFor from a per-replica rate (Store.PerReplica, or one given),
// MinReplicas by the job's min_replicas alone.
package planner
