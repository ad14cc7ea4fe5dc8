// Package demo runs one whole Sluice job on a single machine, composed of
// the product's own parts and nothing else: embedded NATS JetStream and S3
// (the embedded defaults), a synthetic dataset, the job submitted through
// broker.Submit (what `sluice job submit` calls), a controller.Controller
// with the local actuator built by local.FnServe (what `sluice controller`
// runs), replicas that are real `sluice fn serve` processes, the trainer
// agent opened from the job store by id and served over HTTP (what `sluice
// agent` serves), and a simulated trainer that reads GET /v1/batch as a
// training script would. Its processes authenticate to each other as a
// deployment's do: the replicas require a random function token, the
// agent's API a random agent token. `sluice demo` and the end-to-end tests call Run;
// nothing here is mocked. A composition root, it lives with the command
// (internal/ holds leaf plumbing only).
package demo
