// Package traineragent is the trainer's side of Sluice: an Agent serves
// one job. It takes the job's shard tasks from the JetStream work queue
// (package dispatch), sends each to a function replica and
// receives the shard's output, preprocessed chunks, in the response; it
// re-batches them per epoch, hands batches to the trainer's ranks (in
// process through Next, or over an HTTP API for a trainer in another
// language), measures how long the trainer waits for data and publishes
// that as a demand signal for the autoscaler. `sluice agent` runs one as
// its own process. No preprocessed byte passes through NATS: JetStream
// holds only tasks, positions, job records and signals.
//
// Packages, from the ground up (each imports only those below it;
// test/layout TestTrainerAgentFloors): internal/stepplan (the pure rank
// policies: a lone agent's steps, a team's), internal/assembly (batch
// assembly: chunks in, batches out in the schedule's order, mixing, the
// position and a resume's replay set, lag shedding), internal/demand (the
// demand signals: stall window, step reports, GPU meter), beside them;
// internal/readerstate (a reader's plain state: no lock, no I/O, times
// given: the ranks, the step policy, the team's state, the generations of
// ranks and a resume's rewind, Stats); internal/teamproto (the team
// protocol: the envelope and its MAC, a member agent's side, the producer
// of chunks made again); and this package, the shell: agent.go (the
// Agent: its dispatcher as the readers' sink, the settling of tasks,
// demand), reader.go (the Reader around its state: the lock, waiters,
// logs, metrics; and the agent's lock order), role.go (a reader's role: a
// lone agent, a team's planner or member), teamserve.go (the planner
// answering its members), store.go and posstore.go (the position's KV),
// resume.go (a resume's I/O), http.go (the HTTP API).

// Readers: a job declares its readers (wire.JobSpec.Readers; one per
// trainer or sweep trial), and an agent serves all of them, each a Reader
// with its own position, ranks and HTTP API (/r/NAME/v1/...; the first
// also under /v1/...). Each shard is sent once and its chunks are fed to
// every reader: a sweep's trials on one node share its preprocessing. A
// shard's task is settled (acked) only once every reader recorded every
// row of it as handed out, or noted it owed (below), and the agent takes
// no task while the chunks its readers hold fill the job's output buffer
// (OutputBufferBytes). A lagging reader does not set the others' pace
// (assembly's lag.go): while its prefetch is full, it holds half the buffer and
// another reader wants more, it keeps nothing of shards it has not
// started and notes them owed; when its ranks reach them it asks for them
// again, produced for it alone (the other readers drop the copies).
//
// Ranks: by default one agent serves every rank of each reader (ranks on
// other nodes reach it over TCP). The job's batch size is per rank. The
// assembler cuts batches of that size per epoch; the rank layer
// (stepplan.Step, a pure policy) groups world-size consecutive batches of one
// epoch into a global step and gives rank r the r-th. Epochs go to the
// ranks strictly in order. When an epoch is cut and fewer than a full
// step of samples (n) remain, they form its last step, split so that
// sizes differ by at most one (ranks below n mod W get one more; a rank
// may get a batch of zero rows); with drop_last they are not served and
// are counted in Stats.DroppedSamples. Every rank thus takes the same
// number of steps per epoch. A full step that could be the epoch's last
// is held back until more of the epoch arrives or the epoch is cut, so
// that last_step is exact. The world size is fixed by Options.WorldSize,
// else by the first request; another world size gets 409 until a resume
// changes it. Next is rank 0 of a world of 1.
//
// Teams (readerstate.TeamState, stepplan.TeamStep, teamserve.go,
// teamproto.Member): with
// Options.Ranks an agent serves only its node's ranks, and the agents of
// one reader form its team, sharing the job's queue (a fast node takes
// more shards) and each keeping the bytes of what it took. The agent
// serving rank 0 plans: the others (members) tell it each chunk's row count
// over core NATS requests (wire.TeamSubject), and it runs the reader as
// above (positions, resume, settling, the done key) with every batch
// labelled by the agent holding it. The team policy (stepplan.TeamStep) gives
// each rank its own agent's next full batch; once an epoch is cut its
// rest is planned at once (stepplan.Rest): full steps, then the tail split
// evenly over all ranks, each rank taking its own agent's rows while its
// agent has rows its ranks need, and the surplus of others otherwise.
// Rows are drawn from each agent's front, step by step, so every chunk's
// rows are handed out in order and the position's format is unchanged: a
// checkpoint of any team resumes on any other (or on one agent). A member
// asks the planner for its ranks' parts, given as chunk row spans, and
// cuts them from its chunks; rows it does not hold (moved to its ranks at
// an epoch's end, or lost with its restart) it has produced again by a
// function (dispatch.Dispatcher.Produce): bytes never cross agents or
// NATS. A member settles its tasks when the planner's recorded position
// has their shards complete. A restarted planner loads the position and
// the members tell it again what they hold; a restarted member's rows
// are produced again where needed. A team serves a job with one reader,
// its agents share the world size and drop_last, and a resume keeps the
// world size (start the agents anew with another --world-size).
//
// Delivery is exactly once per (epoch, sample), across restarts of the
// agent too. A shard may be sent again (a cut response, a redelivered
// task, a replay); functions are deterministic, so the same rows come
// again, though perhaps cut into other chunks (another function version):
// each reader places a chunk's rows by their shard row (wire.MetaFirst,
// or the rows of the send's earlier chunks) and drops the rows it has.
// An epoch's last, partial batch is cut once every shard's end arrived
// with all the rows it announced; an end that contradicts the rows that
// came is reported, never applied silently. A shard that fails for good
// (package dispatch gives up on it) ends with the rows it had, and its
// other samples are reported failed under the shard's key: an epoch never
// waits for a shard that will not come.
//
// Position: when the first rank takes a part of a global step, the whole
// step is handed out: the reader records its position in
// wire.ReadersBucket under wire.ReaderKey(job, reader) (compare-and-set,
// so two agents that both think they plan one reader stop rather than
// interleave; a reader with
// nothing to write checks on each keep-alive tick whether another wrote)
// before returning the part. A shard's task is settled (acked to the queue)
// only once every reader's recorded position has the shard complete; until
// then the dispatcher keeps it alive. Each part carries that position
// (metadata "position"). The position (assembly.Position) holds, per
// unfinished epoch, the complete shards as ranges or a bitmap, the shard
// ends seen, the chunks handed out in full, the leading rows handed out of
// the others and the shards being replayed (and in a mixed job the rows
// handed out per source, which order what comes next: assembly's mix.go); finished
// epochs are a count. A restarted agent loads it, drops what was handed
// out, skips the rows already handed out of chunks that come again, and
// sends again the shards it notes as replayed.
//
// An agent that dies leaves its unsettled tasks on the queue: after the
// queue's ack wait they go to any agent of the job (a stopped agent
// returns them at once), are produced again, and the position says which
// of their rows were handed out.
//
// Resume: a trainer checkpoints the position of the last step its loop
// took (the client's state dict, State) and, restarted, posts it to
// POST /v1/resume. The reader's recorded position is at or past it; every
// shard the recorded position has anything of beyond the state's, or that
// the reader holds chunks of (assembly.ReplaySet), is produced again (the agent
// sends it itself: dispatch.Replay), and the state's position, with those
// shards noted as replayed, becomes the reader's: every sample the
// checkpointed model had not consumed comes exactly once, to the new world
// size. torchrun restarts the training processes, not the agent beside
// them: a resume once the ranks took batches is a new generation of ranks
// and is accepted, whatever its world size; only two different states
// from ranks that took no batch since the last resume conflict (409).
//
// The gaps: parts of a step that the reader recorded but had not returned
// to every rank when the agent is killed, and a part being written to GET
// /v1/batch, count as delivered: a trainer gets them again only by resuming
// from its checkpoint (what the Python client does when its agent fails).
// An in-process trainer (Next) has no checkpoint and keeps that gap. After
// a restart without a resume, step indices start again at 0. Parts formed
// for a rank that lags are held in memory without bound (DDP ranks step
// together). In a team, a part on its way from the planner to a member
// that dies counts as delivered too.
//
// End: once every rank of a reader got its 410 (Next: io.EOF) after the
// last epoch, the agent writes wire.ReaderDoneKey(job, reader) in
// wire.ReadersBucket; the controller succeeds a job only with that key of
// each declared reader.
//
// Backpressure: the agent takes no task while no reader wants more (each
// stops at PrefetchSamples ready, unless the epoch its ranks are in has no
// step ready) or the chunks it holds reach the job's OutputBufferBytes,
// and it has at most its share of the job's in-flight budget outstanding
// (wire.DispatchPlan). A send under way stops reading its replica's reply
// while the chunks held (and the shards a team's producer keeps) fill the
// buffer, unless the ranks wait for a step that what is held cannot make
// (buffer.go): what the agent holds stays within the buffer plus about one
// chunk per send. A slow trainer thus leaves tasks in the queue, and
// output in the replicas' sockets, rather than in the agent's memory. Samples waiting in a partial
// batch do not count against the prefetch, so an epoch can always
// complete.
//
// Stall accounting (package demand): without step reports
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
