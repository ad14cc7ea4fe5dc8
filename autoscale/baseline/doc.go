// Package baseline holds the autoscalers platform teams run, as policies
// of autoscale.Runner (autoscale.Policy) and of the trace simulator, so
// that Sluice's policy is compared with them on the same work:
//
//   - Knative's KPA (NewKPA, DecideKPA): it sizes each job by the average
//     concurrency of the stable window, or of the shorter panic window
//     while that asks for twice the ready replicas or more; rate limits,
//     min/max scale and the scale-to-zero grace bound it. It observes the
//     concurrency Knative's queue-proxies and activator would count
//     (BacklogConcurrency: the requests a push dispatcher with a fixed
//     parallelism keeps outstanding, from the job's backlog).
//   - KEDA's queue-lag scaler and the HPA behind it (NewKEDA, DecideKEDA):
//     each polling interval it activates a job with lag or, after the
//     cooldown without lag, deactivates it; each HPA sync it resizes an
//     active job to ceil(lag / lagThreshold), up at once by at most
//     max(2x, +4), down only to the highest recommendation within the
//     scale-down stabilization window. It observes the job's tasks
//     pending and in flight (BacklogLag), what KEDA's NATS JetStream
//     scaler reads of the consumer.
//
// Each sizes a job alone, as the platform's autoscaler does: no capacity
// is shared between jobs, each stays within its own min and max
// replicas. Both are emulations, pure functions of what they observe and
// scripted time, written after Knative's pkg/autoscaler/scaling and the
// HPA's replica calculator, and tested on scripted time.
package baseline
