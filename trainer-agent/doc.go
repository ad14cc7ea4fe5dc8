// Package traineragent is the trainer's side of Sluice: it consumes a job's
// preprocessed output chunks from the job's JetStream stream, re-batches
// them per epoch, hands batches to the trainer (in process through Next, or
// over a local HTTP API for a trainer in another language), measures how
// long the trainer waits for data and publishes that as a demand signal for
// the autoscaler. `sluice agent` runs one as its own process.
//
// Readers: a job declares its readers (wire.JobSpec.Readers; one trainer
// agent, or one per trainer rank or sweep trial). The broker creates a
// durable consumer per reader (internal/streams.Reader) with the job's
// output stream, which keeps a chunk until every reader acked it. An agent
// is one reader (Options.Reader), binds to that reader's consumer and gets
// every sample of every epoch, at its own pace; an undeclared reader is
// refused.
//
// Delivery is exactly once per (epoch, sample), across restarts of the
// agent too. Functions may publish a shard's chunks again after a
// redelivery; the stream's duplicate window drops most of those and the
// agent drops the rest by ChunkRef. An epoch's last, partial batch is cut
// once every shard's ShardEnd arrived with all the chunks it announced.
// Epochs are numbered 0..Epochs-1 and a batch never mixes two of them
// (epochs may interleave when chunks are redelivered).
//
// Position: the agent acks a chunk only once every sample of it was handed
// out in batches, and keeps the chunks it holds alive with progress pings
// (streams.ReaderAckWait is short). Before Next returns a batch it records
// the reader's position in wire.ReadersBucket under wire.ReaderKey(job,
// reader) (compare-and-set, so two agents of one reader stop rather than
// interleave), and only then acks the chunks the batch completed. The
// position (see position) holds, per unfinished epoch, the complete shards
// as ranges or a bitmap, the shard ends seen, the chunks handed out in full
// and the leading rows handed out of the others; finished epochs are a
// count. A restarted agent loads it, drops what was handed out, skips the
// rows already handed out of redelivered chunks, and relies on it for the
// shard ends already acked, which will not come again. The one gap: a
// batch returned by Next (or being written to GET /v1/batch) when the agent
// is killed counts as delivered even if the trainer never got it. A
// stopped agent (Run's context cancelled) returns the chunks it holds for
// immediate redelivery; a killed one's come back after ReaderAckWait.
//
// Backpressure: the agent pulls with a byte-bounded pull consumer and stops
// pulling while the batches ready for the trainer hold PrefetchSamples or
// more, so a slow trainer leaves the data in the stream rather than in the
// agent's memory. Samples waiting in a partial batch do not count against
// that bound, so an epoch can always complete. The chunks held unacked stay
// in the output stream: its buffer (OutputBufferBytes) must hold the
// prefetch window and a batch, or the job stalls.
//
// Stall accounting (demand.go, steptime.go, gpu.go): without step reports
// the time the trainer spends blocked in Next (or in GET /v1/batch) is its
// wait: the share of a demand interval during which at least one caller
// was blocked, an ongoing block included. Clients that report step times
// (StepReport, cumulative per rank, so a retry counts once) replace it with
// the wait their training loops saw: the longest any rank reported in the
// interval. With a GPU read through NVML (several times an interval,
// averaged) the stall is the wait while the GPU idled, min(wait, 1 -
// utilisation); without, the wait alone. The reports also split each
// rank's steps into data wait, GPU compute and other (wire.StepTimes),
// carried in the demand signal and counted in sluice_agent_step_seconds_total.
//
// A job cancelled, failed or deleted while the agent reads it stops the
// agent with an error wrapping ErrJobEnded; GET /v1/batch then answers 410
// with the reason.
package traineragent
