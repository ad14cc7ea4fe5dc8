// Package wire holds the messages and NATS subjects that Sluice's components
// exchange: the job record, shard tasks, shard results, output chunks and
// demand signals. It is the one place a subject name or a field is defined,
// so a broker, a function replica and a trainer agent built from different
// commits still agree on the wire.
package wire
