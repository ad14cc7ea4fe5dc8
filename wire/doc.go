// Package wire holds the messages, records and NATS names that Sluice's
// components exchange: the job spec and record, job state and status, the
// controller's lease, shard tasks and results, output chunks and demand
// signals, and sweeps (SweepSpec: which trials share a job). It is the one place a subject, bucket or field is defined, so a
// controller, a function replica, a trainer agent and a program using the
// Go API, built from different commits, still agree on the wire.
package wire
