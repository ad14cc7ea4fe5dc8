// Package local is the autoscaler's actuator on one machine: each replica
// is a child process (normally `sluice fn serve`) started with the same
// command line for every job.
//
// A replica is ready once it prints the ready line (internal/ready,
// "SLUICE_READY <base URL>") on its stdout; its stderr goes to the logger
// at debug level, and its last lines are logged when it dies unasked.
// Replicas are run by internal/supervise in their own process group, so
// a Ctrl-C at the terminal reaches the parent only and the replicas are
// drained by the parent (SIGTERM, then SIGKILL after StopTimeout) rather
// than killed mid-shard.
// On Linux a replica also gets SIGKILL from the kernel when the process
// that started it dies, so a controller that is SIGKILLed leaves no
// orphaned replicas behind (their tasks go back to the queue after the
// dispatch consumer's AckWait).
//
// WithToken gives the replicas the function token they then require
// (internal/bearer) through their environment, never their command line.
//
// A job's series are deleted once it is scaled to zero and its last
// process has exited.
//
// Scale is a reconcile: it counts the replicas that are starting or
// serving and starts or stops (newest first) the difference, so calling it
// again with the same count replaces replicas that died or were killed.
//
// The baselines that size replicas in place of Sluice's policy (Knative's
// KPA, KEDA) are policies of the runner (package autoscale/baseline), not
// actuators: the replicas they decide run here as Sluice's do.
package local
