// Package itest is Sluice's integration suite: every scenario runs the real
// programs as separate processes on 127.0.0.1 and checks, by sample key,
// that every sample of every epoch reaches the trainer exactly once.
//
// The processes are a nats-server built from the module version in go.mod
// (JetStream file store, user/password authentication and TLS with a CA
// made by the test), versitygw (a real S3 server over a directory),
// optionally behind FaultProxy (503 SlowDown, 500, reset connections, slow
// bodies), `sluice controller` (which starts `sluice fn serve` replicas),
// `sluice agent`, and the `sluice job` commands. A Trainer in the test
// process reads batches from an agent over HTTP as a training script would.
//
// The harness (non-test files) is one concept per file: Binaries (building
// sluice and nats-server, finding versitygw), Process (a child process with
// its own log, stop, kill, restart), NATSServer, S3Server, FaultProxy,
// Certs, Trainer, Cluster (all of it wired together, with the connection
// flags the commands take) and metrics scraping. The scenarios are the
// TestIntegration* functions.
//
// Run one scenario:
//
//	go test -count=1 -run TestIntegrationControllerFailover -v ./internal/itest/
//
// versitygw is looked up in <repo>/.bin (where .ci/deps.sh installs it)
// and then in PATH; without it the suite fails when CI=true and skips
// otherwise. `go test -short` skips the suite. SLUICE_ITEST_KEEP=1 keeps
// every scenario's process logs, not only a failed one's.
package itest
