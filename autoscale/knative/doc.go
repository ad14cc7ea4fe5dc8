// Package knative is the autoscaler's actuator on a cluster with Knative
// Serving: every job's replicas are pods of one Knative Service running
// `sluice fn serve` (deploy/knative), and Sluice's decisions reach Knative's
// autoscaler (the KPA) through the one signal it reads: the concurrency of
// the HTTP requests it sees.
//
// The lever is the requests in flight. Scale(job, n) writes nothing to
// the cluster: it sets the job's requested replicas, and the controller
// sizes the job's in-flight budget (its dispatch plan, wire.DispatchPlan)
// by Requested, n x the replica concurrency, instead of by ready replicas;
// the job's agents keep that many tasks in flight to the Service's URL
// (SharedEndpoint: one endpoint for all pods, no per-endpoint limit). The
// Service's KPA target equals the replica concurrency (target-utilization
// 100%), so the KPA runs ceil(sum of in-flight / target) = the sum of what
// Sluice decided over all jobs sharing the Service. At zero pods the
// requests wait in Knative's activator, which is what starts the first
// pod: a budget sized by ready pods would never send and never wake the
// Service.
//
// The Service's template is changed only at a job's start and end
// (StartJob, EndJob, called by the autoscale.Runner), and only when the
// floor it needs changes: min-scale = the sum of the running jobs'
// MinReplicas, max-scale = Options.MaxScale. Every template change makes a
// new Revision (knative/serving#6717), and patching the PodAutoscaler
// directly does not scale up (#10327), so a per-tick patch is never made.
//
// Ready replicas come from the cluster: the sum of Revision
// status.actualReplicas (the pods the KPA counts ready) over the Service's
// Revisions, read every Options.Poll by Run. Ready(job) is the job's share
// of them in proportion to what each job requested (ShareReady), so a pod
// that is still starting is not counted and the policy does not read a
// cold start as a slow replica: it holds while replicas start. Endpoints is
// the Service's address (status.address.url, cluster-local), the same for
// every job; Knative's routing spreads the requests over the pods.
//
// Observed on a real cluster (test/e2e: Kubernetes v1.34.2, Knative
// Serving v0.42.2's own controller, activator, autoscaler and
// queue-proxy, Traefik v3.6 as the KIngress; one 2-core node), not
// assumed:
//   - The KPA follows the requests in flight: as the controller raised a
//     job from 1 to 2 to 3 replicas, Knative ran 1, 2, 3 ready pods, each
//     1-6 s after the decision (pod start and readiness; the image is on
//     the node).
//   - At zero pods the activator holds a task until a pod is ready and
//     then passes it on: a job's first batch came 1.0-1.9 s after submit,
//     against 0.2 s with local replicas on the same machine. Of that, the
//     pod object existed 0.13-0.19 s after submit (the controller's
//     decision, the activator, the KPA, the Deployment); the kubelet took
//     0.6-1.5 s more to report the pod's IP (its sandbox, the CNI, two
//     containers, and a status written only at its next relist, once a
//     second with containerd 1.6, which has no CRI events); the first
//     batch followed 0.15-0.25 s later.
//   - Ready can lag serving by 10 s: the kubelet probes queue-proxy every
//     10 s with a 1 s timeout (Knative's probe for a period of 0), and
//     queue-proxy answers once the function container is ready. When the
//     container took longer than that first second, the pod served
//     through the activator (which probes pods itself) for 10 s while
//     actualReplicas said 0; in 2 of about 12 runs a whole 11 s job ran so.
//     The policy therefore counts one replica as serving while samples
//     arrive and none is ready.
//   - With target-burst-capacity 0 the activator leaves the path once a
//     pod is up (Knative's default, 200, keeps it there: it cost as much
//     CPU per byte as each other proxy). Only for new connections:
//     Traefik's Knative provider routes to the revision Service's
//     ClusterIP, so kube-proxy places each backend connection once, and a
//     connection Traefik opened (and kept alive) while the activator
//     fronted the revision stayed on the activator after the
//     ServerlessService switched to Serve. In 5 of 8 runs of the streaming
//     test that cost 1.0-2.1 CPU s per GB more. With Traefik's backend
//     keep-alive off (serversTransport.maxIdleConnsPerHost -1; one TCP
//     connect per shard, which streams for seconds) it was out of the
//     path in every run; the test fails when it is not.
//   - A shard's output streams through Traefik, the revision's Service
//     and queue-proxy chunk by chunk, each proxy spending about 1 CPU
//     second per GB (Traefik 1.0-1.3, queue-proxy 0.7-1.0, against the
//     function's 2.3-2.9 producing it). The Revision's timeoutSeconds
//     bounds the time to the response's first byte, not its length: a
//     response read slowly for 4.5 s passed a timeoutSeconds of 2
//     (queue-proxy's timeout handler gives up only while nothing was
//     written; idleTimeoutSeconds, 0 by default, would bound the gaps).
//   - After the last request, the pods stay about the stable window
//     (window, 30 s here) and the last one the scale-to-zero grace
//     (30 s): zero pods about 60 s after a job's end.
//   - A template patch (min-scale at a job with min_replicas starting or
//     ending) makes a Revision; with an ingress that reports its Route
//     ready, Knative retires the superseded one (routingState reserve) and
//     it keeps no pod, min-scale or not. Without one, the old Revision
//     keeps its min-scale pods.
package knative
