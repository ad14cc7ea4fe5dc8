// Package integration is Sluice's integration suite: every scenario runs the real
// programs as separate processes on 127.0.0.1 and checks, by sample key,
// that every sample of every epoch reaches the trainer exactly once.
//
// The processes are a nats-server built from the module version in go.mod
// (JetStream file store, user/password authentication and TLS with a CA
// made by the test), versitygw (a real S3 server over a directory),
// optionally behind FaultProxy (503 SlowDown, 500, reset connections, slow
// bodies), `sluice controller` (which writes each job's dispatch plan and
// starts `sluice fn serve` replicas, which need S3 only), `sluice agent`
// (which pulls its job's tasks, sends them to the replicas and receives
// the output in their responses), and the `sluice job` commands. A Trainer
// in the test process reads batches from an agent over HTTP as a training
// script would: at the agent's URL, or at /r/READER for each reader of a
// job with several (one agent serves them all).
//
// The harness (non-test files) is one concept per file: Binaries (building
// sluice and nats-server, finding versitygw), Process (a child process with
// its own log, run by internal/supervise in its own process group; Stop is
// SIGTERM then SIGKILL, Kill is SIGKILL, Restart keeps the arguments, so
// the port and data directory), Certs, NATSServer (with
// its monitoring port: Varz), S3Server, FaultProxy, Dataset, Trainer (and
// its by-key Report with the figures line "scenario=... expected=...
// delivered=... lost=... duplicates=... failed=... seconds=..."),
// NATSBytes (what nats-server moved per byte delivered to trainers, with
// the figures line "scenario=... nats_in_bytes=... nats_out_bytes=...
// nats_msgs=... delivered_bytes=... nats_bytes_per_delivered_byte=...
// target=..."), metrics scraping (ScrapeSum, ScrapeReplicas,
// ScrapeJobReplicas, SeriesOf), DescribeJob (a job's JetStream state:
// record, tasks, task consumer, dispatch plan, reader positions; logged
// when a scenario fails) and Cluster: one scenario's servers with
// StartController, StartAgent, Submit, Sluice and the connection flags
// (ConnArgs) and environment (Env, with the cluster's mark that the
// replicas inherit) every sluice process gets. The scenarios are the
// TestIntegration* functions; each starts its own Cluster.
//
// Run one scenario:
//
//	go test -count=1 -run TestIntegrationControllerFailover -v ./test/integration/
//
// versitygw is looked up in <repo>/.bin (where .ci/deps.sh installs it)
// and then in PATH; without it the suite fails when CI=true and skips
// otherwise. `go test -short` skips the suite. SLUICE_ITEST_KEEP=1 keeps
// every scenario's process logs, not only a failed one's.
package integration
