// Package traineragent is the trainer's side of Sluice: it consumes a job's
// preprocessed output chunks from the job's JetStream stream, re-batches
// them per epoch, hands batches to the trainer (in process through Next, or
// over a local HTTP API for a trainer in another language), measures how
// long the trainer waits for data and publishes that as a demand signal for
// the autoscaler.
//
// Delivery is exactly once per (epoch, sample): functions may publish a
// shard's chunks again after a redelivery, the stream's duplicate window
// drops most of those and the agent drops the rest by ChunkRef. An epoch is
// complete once every shard's ShardEnd arrived together with all the chunks
// it announced; only then is the epoch's last, partial batch emitted. Epochs
// are numbered 0..Epochs-1 and a batch never mixes two of them.
//
// Backpressure: the agent pulls with a byte-bounded pull consumer and stops
// pulling (and acking) while the batches ready for the trainer hold
// PrefetchSamples or more, so a slow trainer leaves the data in the stream
// rather than in the agent's memory. Samples waiting in a partial batch do
// not count against that bound, so an epoch can always complete.
//
// Stall accounting: the time the trainer spends blocked in Next (or in GET
// /v1/batch) is its stall time; StallFraction in a demand signal is the
// share of the signal's interval during which at least one caller was
// blocked, an ongoing block included.
//
// Restarts: the agent keeps its partial batches and dedupe state in memory
// only. The durable consumer resumes after the last acked message, so an
// agent restarted in the middle of a job does not see the chunks its
// predecessor acked; a job is meant to be consumed by one agent run.
package traineragent
