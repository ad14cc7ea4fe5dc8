package natsperm

import (
	"slices"
	"strings"

	"github.com/sluice-project/sluice/wire"
)

// Role is one component's NATS user: the subjects it may publish to and
// subscribe to (wildcards as NATS has them), and the inbox prefix its
// connection uses, which its Subscribe allows and no other role's does.
type Role struct {
	// Name is the component: controller, agent, cli or admin.
	Name        string
	InboxPrefix string
	Publish     []string
	Subscribe   []string
}

// User is the role's user name in the NATS configuration.
func (r Role) User() string { return "sluice-" + r.Name }

// PasswordEnv is the environment variable of the NATS server that holds
// the role's password (the shipped configuration reads it from there).
func (r Role) PasswordEnv() string { return "SLUICE_NATS_" + strings.ToUpper(r.Name) + "_PASSWORD" }

// The inbox prefixes. The cli's is the admin's too: `sluice job`
// commands do not know which of the two users they run as.
const (
	controllerInbox = "_INBOX_sluice_controller"
	agentInbox      = "_INBOX_sluice_agent"
	cliInbox        = "_INBOX_sluice_cli"
)

// JetStream API subjects.
const (
	api     = "$JS.API."
	apiInfo = api + "INFO" // account information: every component's start-up check
)

func kvStream(bucket string) string { return "KV_" + bucket }

// Access to key-value buckets, each what nats.go's calls publish to.

// openKV is binding to buckets (js.KeyValue reads the stream's info).
func openKV(buckets ...string) []string {
	return each(buckets, func(b string) string { return api + "STREAM.INFO." + kvStream(b) })
}

// getKV is reading keys: direct gets.
func getKV(buckets ...string) []string {
	return each(buckets, func(b string) string { return api + "DIRECT.GET." + kvStream(b) + ".>" })
}

// watchKV is watching buckets or listing their keys: ordered consumers,
// created, deleted, and answered when the server asks for flow control.
func watchKV(buckets ...string) []string {
	var out []string
	for _, b := range buckets {
		s := kvStream(b)
		out = append(out, api+"CONSUMER.CREATE."+s+".>", api+"CONSUMER.DELETE."+s+".>", "$JS.FC."+s+".>")
	}
	return out
}

// writeKV is putting, creating, updating, deleting and purging keys of
// buckets: NATS cannot tell these apart, all publish to the key's subject.
func writeKV(buckets ...string) []string {
	return each(buckets, func(b string) string { return "$KV." + b + ".>" })
}

func each(buckets []string, f func(string) string) []string {
	out := make([]string, len(buckets))
	for i, b := range buckets {
		out[i] = f(b)
	}
	return out
}

// allBuckets are the buckets streams.Ensure creates (a test keeps the two
// equal; natsperm does not import streams, whose tests start NATS with
// the shipped authorization, which is natsperm's).
var allBuckets = []string{wire.JobsBucket, wire.StatusBucket, wire.LeasesBucket, wire.ReadersBucket,
	wire.SweepsBucket, wire.PlansBucket, wire.DispatchBucket}

// manageStreams is creating and updating the task stream and every
// bucket's stream (streams.Ensure, which updates first and creates what
// is missing).
func manageStreams() []string {
	names := []string{wire.TaskStream}
	for _, b := range allBuckets {
		names = append(names, kvStream(b))
	}
	var out []string
	for _, n := range names {
		out = append(out, api+"STREAM.CREATE."+n, api+"STREAM.UPDATE."+n)
	}
	return out
}

// The task stream's API subjects.
const (
	// Its info: a broker checks that it exists.
	taskStreamInfo = api + "STREAM.INFO." + wire.TaskStream
	// Purging a job's tasks (a broker's Release).
	taskStreamPurge = api + "STREAM.PURGE." + wire.TaskStream
	// Creating a job's task consumer (submit; the same subject updates
	// it) and deleting it (Release).
	taskConsumerCreate = api + "CONSUMER.CREATE." + wire.TaskStream + ".>"
	taskConsumerDelete = api + "CONSUMER.DELETE." + wire.TaskStream + ".*"
	// A consumer's info: its pending counts, whether it still exists.
	taskConsumerInfo = api + "CONSUMER.INFO." + wire.TaskStream + ".*"
	// Pulling a job's tasks, and acking them (the server's ack subjects
	// name the stream and consumer).
	taskPull = api + "CONSUMER.MSG.NEXT." + wire.TaskStream + ".*"
	taskAck  = "$JS.ACK." + wire.TaskStream + ".>"
)

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func inbox(prefix string) string { return prefix + ".>" }

// Controller is `sluice controller`'s role: it ensures the streams,
// watches job records and leases, writes records (state changes),
// statuses, leases, dispatch plans and learned plans, reads the readers'
// done keys, sets its jobs' consumers' ack wait and reads their backlog,
// releases finished jobs, and takes demand signals and shard results. It
// answers the NATS server's auth callout: who an agent is, and what its
// job lets it do (AgentFor).
func Controller() Role {
	return Role{
		Name:        "controller",
		InboxPrefix: controllerInbox,
		Publish: join(
			[]string{apiInfo, taskStreamInfo, taskStreamPurge, taskConsumerCreate, taskConsumerDelete, taskConsumerInfo},
			manageStreams(),
			openKV(wire.JobsBucket, wire.StatusBucket, wire.LeasesBucket, wire.ReadersBucket, wire.DispatchBucket, wire.PlansBucket),
			getKV(wire.JobsBucket, wire.StatusBucket, wire.LeasesBucket, wire.ReadersBucket, wire.DispatchBucket, wire.PlansBucket),
			watchKV(wire.JobsBucket, wire.LeasesBucket),
			writeKV(wire.JobsBucket, wire.StatusBucket, wire.LeasesBucket, wire.DispatchBucket, wire.PlansBucket),
			[]string{calloutReplies},
		),
		Subscribe: join([]string{inbox(controllerInbox), wire.ResultSubjects, wire.DemandSubjects, CalloutSubject}),
	}
}

// The auth callout: the server asks on CalloutSubject (as a request from
// no client) and takes the answer on a reply subject under
// calloutReplies, which only internal subscriptions of the server's
// listen to.
const (
	CalloutSubject = "$SYS.REQ.USER.AUTH"
	calloutReplies = "$SYS._INBOX.>"
)

// AgentFor is the role of `sluice agent` for job (the trainer agent and
// its dispatcher), narrowed to that job: it reads the job's record and
// dispatch plan, pulls and acks the job's tasks, reads and writes the
// job's reader positions, done marks and failed-tasks record, and
// publishes the job's demand signals and shard results. The agents of a
// reader's team ask its planner on the job's team subjects, and the
// planner answers in the asking agent's inbox: agents of the job publish
// to the job's agent inboxes, which no other role and no other job reads.
// No agent has a static user: the controller grants this role, per
// connection, through the NATS server's auth callout to an agent that
// proves it holds the job's team key (wire.AgentNATSUser).
//
// What stays account-wide: opening a bucket reads its stream's info,
// which can list keys (job and reader names, not values). An agent may
// create no consumer on a bucket (JetStream would deliver to any subject
// it names): it follows its record and plan by reading them
// (internal/kvpoll).
func AgentFor(job string) Role {
	prefix := agentInboxFor(job)
	consumer := wire.DispatchConsumer(job)
	getKey := func(bucket, key string) []string {
		return []string{api + "DIRECT.GET." + kvStream(bucket) + ".$KV." + bucket + "." + key}
	}
	readers := func(key string) []string {
		return append(getKey(wire.ReadersBucket, key), "$KV."+wire.ReadersBucket+"."+key)
	}
	return Role{
		Name:        "agent",
		InboxPrefix: prefix,
		Publish: join(
			[]string{apiInfo, wire.ResultSubject(job), wire.DemandSubject(job),
				api + "CONSUMER.INFO." + wire.TaskStream + "." + consumer,
				api + "CONSUMER.MSG.NEXT." + wire.TaskStream + "." + consumer,
				"$JS.ACK." + wire.TaskStream + "." + consumer + ".>"},
			[]string{wire.TeamSubject(job, "*", "*"), inbox(prefix)},
			openKV(wire.JobsBucket, wire.DispatchBucket, wire.ReadersBucket),
			// The job's record and dispatch plan are read, and followed
			// by reading them again (internal/kvpoll): an agent creates
			// no consumer, whose deliver subject no permission checks.
			getKey(wire.JobsBucket, job),
			getKey(wire.DispatchBucket, job),
			readers(wire.ReaderKey(job, "*")),
			readers(wire.ReaderDoneKey(job, "*")),
			readers(wire.ShardsFailedKey(job)),
		),
		Subscribe: join([]string{inbox(prefix), wire.TeamSubject(job, "*", "*")}),
	}
}

// agentInboxFor is the inbox prefix of job's agents.
func agentInboxFor(job string) string { return agentInbox + "." + job }

// CLI is the role of `sluice job submit|list|status|cancel`, `sluice
// sweep submit|status` and `sluice plan`.
func CLI() Role {
	return Role{
		Name:        "cli",
		InboxPrefix: cliInbox,
		Publish:     cliPublish(),
		Subscribe:   []string{inbox(cliInbox)},
	}
}

// cliPublish: a broker opens the job, status, lease, reader and dispatch
// buckets; submit writes a record, creates the task consumer and queues
// tasks (a failed one looks up what to roll back, listing reader
// positions); list and status read records and statuses (status --watch
// watches them); cancel writes the record and releases the job (deletes
// its consumer, purges its tasks and dispatch plan); sweeps write their
// records and read learned plans.
func cliPublish() []string {
	return join(
		[]string{apiInfo, taskStreamInfo, taskStreamPurge, taskConsumerCreate, taskConsumerDelete, wire.TaskSubjects},
		openKV(wire.JobsBucket, wire.StatusBucket, wire.LeasesBucket, wire.ReadersBucket, wire.DispatchBucket,
			wire.SweepsBucket, wire.PlansBucket),
		getKV(wire.JobsBucket, wire.StatusBucket, wire.LeasesBucket, wire.ReadersBucket, wire.DispatchBucket,
			wire.SweepsBucket, wire.PlansBucket),
		watchKV(wire.JobsBucket, wire.StatusBucket, wire.ReadersBucket),
		writeKV(wire.JobsBucket, wire.SweepsBucket, wire.DispatchBucket),
	)
}

// Admin is the role of `sluice job delete`, and of any command creating
// the streams before a controller has: the cli's rights, purging what a
// job left in the status, lease and reader buckets, and managing streams.
func Admin() Role {
	return Role{
		Name:        "admin",
		InboxPrefix: cliInbox,
		Publish: join(
			cliPublish(),
			manageStreams(),
			writeKV(wire.StatusBucket, wire.LeasesBucket, wire.ReadersBucket),
		),
		Subscribe: []string{inbox(cliInbox)},
	}
}

// Roles are every role with a static user, in the order the
// configuration lists them. Agents have none: see AgentFor.
func Roles() []Role { return []Role{Controller(), CLI(), Admin()} }
