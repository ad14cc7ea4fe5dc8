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
//   - agent (beside the trainers): reads job records and dispatch plans,
//     pulls and acks its jobs' tasks, writes reader positions, publishes
//     demand signals and shard results; the agents of a reader's team
//     (`sluice agent --ranks`) ask their planner on the team subjects and
//     are answered in the agent inbox. It cannot write a job record, a
//     status, a lease or a dispatch plan, create or delete a stream or a
//     consumer, or read another component's replies.
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
// NATS permissions name subjects, not operations: a user that may purge a
// key may also put it (both publish to $KV.<bucket>.<key>). The cli can
// therefore write dispatch plans (cancel purges them), and the admin
// reader positions. JetStream does not check the deliver subject of a
// push consumer against its creator's permissions: a user that may watch
// a bucket (create an ordered consumer on it) could have its entries
// delivered to another subject.
package natsperm
