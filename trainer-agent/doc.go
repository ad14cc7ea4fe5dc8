// Package traineragent is the trainer's side of Sluice: it consumes a job's
// preprocessed output chunks from the job's JetStream stream, re-batches
// them per epoch, hands batches to the trainer's ranks (in process through
// Next, or over an HTTP API for a trainer in another language), measures how
// long the trainer waits for data and publishes that as a demand signal for
// the autoscaler. `sluice agent` runs one as its own process.
//
// Readers: a job declares its readers (wire.JobSpec.Readers; one per
// trainer or sweep trial). The broker creates a durable consumer per reader
// (internal/streams.Reader) with the job's output stream, which keeps a
// chunk until every reader acked it. An agent is one reader
// (Options.Reader), binds to that reader's consumer and gets every sample
// of every epoch, at its own pace; an undeclared reader is refused.
//
// Ranks: one agent serves every rank of one reader (a DDP trainer is one
// reader; ranks on other nodes reach it over TCP). The job's batch size is
// per rank. The assembler cuts batches of that size per epoch; the rank
// layer (planStep, a pure policy) groups world-size consecutive batches of
// one epoch into a global step and gives rank r the r-th. Epochs go to the
// ranks strictly in order. When an epoch is cut and fewer than a full step
// of samples (n) remain, they form its last step, split so that sizes
// differ by at most one (ranks below n mod W get one more; a rank may get
// a batch of zero rows); with drop_last they are not served and are
// counted in Stats.DroppedSamples. Every rank thus takes the same number of
// steps per epoch. A full step that could be the epoch's last is held back
// until more of the epoch arrives or the epoch is cut, so that last_step is
// exact. The world size is fixed by Options.WorldSize, else by the first
// request; another world size gets 409 until a resume changes it. Next is
// rank 0 of a world of 1.
//
// Delivery is exactly once per (epoch, sample), across restarts of the
// agent too. Functions may publish a shard's chunks again after a
// redelivery or a replay; the stream's duplicate window drops most of
// those and the agent drops the rest by ChunkRef. An epoch's last, partial
// batch is cut once every shard's ShardEnd arrived with all the chunks it
// announced.
//
// Position: the agent acks a chunk only once every sample of it was handed
// out, and keeps the chunks it holds alive with progress pings
// (streams.ReaderAckWait is short). When the first rank takes a part of a
// global step, the whole step is handed out: the agent records the
// reader's position in wire.ReadersBucket under wire.ReaderKey(job,
// reader) (compare-and-set, so two agents of one reader stop rather than
// interleave; an agent with nothing to write checks on each keep-alive tick
// whether another wrote) before returning the part, and only then acks the
// chunks the step completed. Each part carries that position (metadata
// "position"). The position (see position) holds, per unfinished epoch,
// the complete shards as ranges or a bitmap, the shard ends seen, the
// chunks handed out in full, the leading rows handed out of the others and
// the shards being replayed; finished epochs are a count. A restarted agent
// loads it, drops what was handed out, skips the rows already handed out of
// redelivered chunks, and relies on it for the shard ends already acked.
//
// Resume: a trainer checkpoints the position of the last step its loop
// took (the client's state dict, State) and, restarted, posts it to
// POST /v1/resume before any batch is handed out. The agent's recorded
// position is at or past it; every shard whose messages the recorded
// position may have had acked beyond the state's (replaySet) is produced
// again through broker.Replay, the chunks held go back to the stream, and
// the state's position, with those shards noted as replayed, becomes the
// reader's: every sample the checkpointed model had not consumed comes
// exactly once, to the new world size. A replay that cannot be queued
// stops the agent; the position it leaves notes the shards, so the next
// resume asks again.
//
// The gaps: parts of a step that the agent recorded but had not returned
// to every rank when it is killed, and a part being written to GET
// /v1/batch, count as delivered: a trainer gets them again only by resuming
// from its checkpoint (what the Python client does when its agent fails).
// An in-process trainer (Next) has no checkpoint and keeps that gap. After
// a restart without a resume, step indices start again at 0. A stopped
// agent (Run's context cancelled) returns the chunks it holds for
// immediate redelivery; a killed one's come back after ReaderAckWait.
// Parts formed for a rank that lags are held in memory without bound (DDP
// ranks step together).
//
// End: once every rank got its 410 (Next: io.EOF) after the last epoch and
// the reader's consumer settled (every chunk acked), the agent writes
// wire.ReaderDoneKey(job, reader) in wire.ReadersBucket; the controller
// succeeds a job only with that key of each declared reader.
//
// Backpressure: the agent pulls with a byte-bounded pull consumer and stops
// pulling while the batches ready hold PrefetchSamples or more, unless the
// epoch the ranks are in has no step ready (its redelivered chunks may come
// after later epochs' batches). A slow trainer thus leaves the data in the
// stream rather than in the agent's memory. Samples waiting in a partial
// batch do not count against that bound, so an epoch can always complete.
// The chunks held unacked stay in the output stream: its buffer
// (OutputBufferBytes) must hold the prefetch window and a step, or the job
// stalls.
//
// Lagging readers (lag.go): readers of one job (the trials of a sweep)
// share that buffer, and once it nears full the dispatcher pauses for
// every reader. A reader whose prefetch is full checks every second
// whether the stream holds its lag bound (Options.MaxLagBytes; half the
// buffer when the job has several readers), waits for this reader (it
// has not acked the stream's oldest message) and another reader was
// delivered everything (so that reader waits, not merely the producers
// ahead of all: holdsBuffer, a pure rule). If so it sheds: it pulls past its prefetch and acks what it
// pulls without keeping it, its shards noted as owed in the position
// (written before the acks). When its ranks run out of steps in an epoch
// with owed shards it asks for them through broker.Replay; they come on
// its own replay subject, are never shed, and the copies of chunks it had
// kept are dropped by ChunkRef. The other readers go on at their pace;
// the lagging one pays with the shards produced twice and a replay's
// latency. A resume treats owed shards as acked (replaySet).
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
// (Sluice-End: ended) with the reason.
package traineragent
