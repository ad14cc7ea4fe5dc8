// Package dispatch is what a trainer agent embeds to feed itself: it
// pulls its job's shard tasks from JetStream, sends each to a function
// replica and receives the shard's output in the reply, handing it to a
// Sink (the agent) chunk by chunk.
//
// # Queue
//
// Every agent of a job pulls from the job's one durable consumer,
// wire.DispatchConsumer(job) on wire.TaskStream (streams.Dispatch; New
// creates it if the broker has not), so a fast node takes more shards.
// The job's owning controller writes a wire.DispatchPlan under the job id
// in wire.DispatchBucket: the replica endpoints, their concurrency and
// each agent's share of the tasks in flight. A Dispatcher takes a task
// only while fewer than its share are being sent and Sink.Room says yes;
// without a plan it sends nothing and holds no pull open.
//
// # Sending and the frame protocol
//
// A task is POSTed to an endpoint as a binary-mode CloudEvent (type
// wire.EventTypeShardTask, source wire.EventSource, id task.ID(), data the
// task as JSON), with Options.Token, the function token, as its bearer
// token when one is set (on the request, so that a redirect to another
// host does not carry it). The function answers 200 with Content-Type
// wire.ShardStreamMediaType and a stream of frames (wire/frame.go): chunk
// frames, in index order from 0, each passed to Sink.Chunk as it arrives;
// then an end frame (a wire.ShardEnd naming the task's job, epoch and
// shard, and as many chunks as came), after which Sink.End is called; or
// an error frame (a wire.ShardError). Errors before the first frame are
// HTTP statuses.
//
// # Failures and retries
//
// A send fails permanently on a function's 400, 404, 413 or 415 (marked
// wire.HeaderTaskRejected: a reused port's 404 is transient), or an error
// frame marked permanent: Sink.Failed at once. Anything else is retried on the
// same held task, after RetryDelay (jittered exponential backoff) and on
// another endpoint if the plan has one: a connection error, another
// status, an error frame, a reply that ends or breaks before its end frame
// ("shard incomplete"), a replica silent for Options.StallTimeout, and a
// malformed frame stream (wire.ErrFrame, or a reply that is not a frame
// stream), and 401 or 403 (this agent's function token missing or wrong:
// counted so that a misconfigured agent fails its tasks, each naming the
// token's source, rather than retrying them for ever). Those count
// against Options.MaxDeliver; at MaxDeliver failed
// sends the task fails for good (Sink.Failed). 429 and 503 (the replica
// busy or draining) and a plan without endpoints are the replicas' state,
// not the task's: retried (the latter once the plan changes) without
// counting. Functions are deterministic, so a task sent again yields the
// same chunks with the same indices and bytes: the sink drops the copies
// it holds.
//
// # Acks and Settle
//
// A task is acked only by Settle, which the agent calls once every sample
// of the shard was handed out to its readers and the reader position
// saying so was written; until then (sending, or ended and waiting for
// the readers) it is kept alive with a progress ping every AckWait/3.
// Settle publishes the task's wire.ShardResult on wire.ResultSubject(job)
// for the owning controller. A failed task is settled the same way, and
// acked, not terminated: the failure is recorded by the agent and carried
// to the controller in the result's Error (and, before the ack, in the
// job's wire.ShardsFailedKey record: a result published while no
// controller owns the job is lost, the record is not), and the server's term advisory
// would be a second, unread record; one path for every settled task keeps
// the queue's accounting (NumAckPending) the same for both.
//
// A task the server delivers again while the Dispatcher holds it (a ping
// lost) is not sent again: the newer delivery is kept for the ack.
//
// # When an agent stops or dies
//
// When Run's ctx ends, its sends are cancelled and every task it holds
// and has not settled is Nak'ed: the server redelivers it at once to any
// agent of the job, which sends it again; that agent's reader position
// says which samples were already handed out. An agent that dies leaves
// its tasks unacked and unpinged: they are redelivered after the
// consumer's AckWait. When the consumer is deleted (the job cancelled or
// deleted) Run returns an error wrapping ErrJobGone.
//
// # Replays
//
// Replay sends a task outside the queue, for a reader resumed from a
// checkpoint that needs a shard whose queue task was acked long ago. It
// takes a send slot of the share before any queued task (whatever
// Sink.Room says: the resumed reader waits for exactly this output), its
// output goes through the same Sink, it has nothing to ack, and its result
// is published with Replay set when it is settled.
//
// Produce sends a task once more for the caller's own use, outside the
// queue, the share and the Sink: an agent of a reader's team cuts rows
// from its chunks that another agent took (traineragent's team). It is
// retried as a send is, and counted in Stats.Producing until it ends, so
// that the agent's demand keeps a replica for it.
//
// # Locality
//
// With a plan of replicas seen one by one (PerEndpoint > 0), each shard
// goes to its home: the first endpoint in Rendezvous order of its bucket
// and key over the plan's endpoints, whose shard cache holds the shard
// from earlier epochs. Every agent computes the same homes. A task waits
// at most Options.LocalityWait for a busy home (this agent's PerEndpoint
// sends on it), then takes the next free endpoint in its order. A plan of
// a Knative Service URL (PerEndpoint 0) sends to the least loaded
// endpoint. The choice is a pure function (chooseEndpoint) of the plan,
// the sends in flight per endpoint and the time waited.
package dispatch
