// Package demo runs one whole Sluice job on a single machine: embedded NATS
// JetStream and S3, a synthetic dataset, the broker and its dispatcher,
// function replicas as local processes started from zero by the autoscaler,
// the trainer agent and a simulated trainer. `sluice demo` and the
// end-to-end tests call Run; nothing here is mocked.
package demo
