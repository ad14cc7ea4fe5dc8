// Package natsperm is the one definition of what each Sluice component
// may do on NATS: the subjects its user may publish to and subscribe to,
// JetStream's API and key-value subjects among them, and the inbox prefix
// its connection uses for replies. Render writes them as the
// authorization block of a nats-server configuration; the shipped
// deploy/knative/nats/nats.conf holds that block, and a test keeps the two
// equal.
//
// The roles, least privilege each:
//
//   - controller: creates and updates the streams and buckets; runs jobs
//     (their records, statuses, leases, dispatch plans, learned plans,
//     task consumers); reads reader positions; takes the agents' demand
//     signals and shard results.
//   - agent (beside the trainers), one per job (AgentFor): no static user;
//     the controllers grant it per connection through the server's auth
//     callout, to an agent that proves it holds the job's team key. It
//     reads its job's record and dispatch plan, pulls and acks its job's
//     tasks, writes its job's reader positions, publishes its job's demand
//     signals and shard results; the agents of a reader's team (`sluice
//     agent --ranks`) ask their planner on the job's team subjects and are
//     answered in the job's agent inbox. It can touch nothing of another
//     job, write no job record, status, lease or dispatch plan, create or
//     delete no stream and no consumer, and read no other component's
//     replies.
//   - cli (`sluice job submit|list|status|cancel`, `sluice sweep ...`,
//     `sluice plan`): writes job records and sweeps, queues tasks and
//     creates their consumer, cancels (which deletes a job's consumer and
//     purges its tasks and dispatch plan); reads statuses and plans. It
//     cannot write reader positions, statuses, leases or learned plans,
//     take tasks, or create, change or delete a stream.
//   - admin (`sluice job delete`, and creating the streams before any
//     controller ran): the cli's rights plus purging a job's statuses,
//     leases and reader positions, and creating and updating the streams.
//
// Render writes the static users and the auth_callout block; the
// controller answers the callout with AgentFor's permissions.
//
// NATS permissions name subjects, not operations: a user that may purge a
// key may also put it (both publish to $KV.<bucket>.<key>). The cli can
// therefore write dispatch plans (cancel purges them), and the admin
// reader positions. JetStream does not check the deliver subject of a
// push consumer against its creator's permissions: a user that may watch
// a bucket (create an ordered consumer on it) could have its entries
// delivered to another subject. Agents therefore may create no consumer
// (internal/kvpoll reads their job's record and plan instead); the cli
// and the admin, trusted users, still watch.
package natsperm
