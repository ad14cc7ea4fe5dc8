// Package baseline holds the autoscalers platform teams run, as policies
// of autoscale.Runner (autoscale.Policy), so that Sluice's policy is
// compared with them on the same work:
//
//   - Knative's KPA (NewKPA): Knative's own decider, knative.dev/serving's
//     pkg/autoscaler/scaling (scaling.New, its Scale each round), with the
//     DeciderSpec Knative's MakeDecider makes of a concurrency-scaled
//     revision under the default config-autoscaler (target utilisation
//     70%, 60 s stable and 6 s panic windows, panic threshold 200%, scale
//     up at most 1000x and down 2x a decision). Its metrics client is
//     written here (kpaMetrics): the concurrency the revision's activator
//     and queue-proxies would report, recorded each round into Knative's
//     own bucketed window averages (pkg/autoscaler/aggregation) as its
//     collector does. The concurrency is observed by a Metric:
//     BacklogConcurrency, the requests a push dispatcher with a fixed
//     parallelism keeps outstanding, from the job's backlog.
//   - KEDA's queue-lag scaler and the HPA behind it (NewKEDA, DecideKEDA):
//     each polling interval (30 s) it activates a job with lag or, after
//     the cooldown (300 s) without lag, deactivates it; each HPA sync it
//     resizes an active job to HPADesired (ceil(lag / lagThreshold),
//     held within the tolerance 0.1), up at once by at most max(2x, +4),
//     down only to the highest recommendation within the scale-down
//     stabilization window (300 s). It observes the job's tasks pending
//     and in flight (BacklogLag), what KEDA's NATS JetStream scaler reads
//     of the consumer.
//
// Still emulated, and why: what around Knative's decider runs in its
// reconciler and data plane (the scale-to-zero grace, 30 s, before the
// last pod goes; min/max scale; the queue-proxies' and activator's
// reporting, read here from the backlog), since those need a cluster; and
// KEDA and the HPA whole, since neither is a Go package one can call (the
// HPA's replica calculator and behaviours live in the Kubernetes
// controller manager): HPADesired and DecideKEDA are written after them
// and tested on scripted time.
//
// Each sizes a job alone, as the platform's autoscaler does: no capacity
// is shared between jobs, each stays within its own min and max replicas.
package baseline
