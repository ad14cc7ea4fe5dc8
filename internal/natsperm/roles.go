package natsperm

import (
	"slices"
	"strings"

	"github.com/sluice-project/sluice/internal/streams"
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

// readKV is what opening, reading and watching bucket takes: its stream's
// info, direct gets of its keys, and the ordered consumers of a watch (or
// a key listing), created, deleted and flow-controlled.
func readKV(buckets ...string) []string {
	var out []string
	for _, b := range buckets {
		s := kvStream(b)
		out = append(out, api+"STREAM.INFO."+s, api+"DIRECT.GET."+s+".>",
			api+"CONSUMER.CREATE."+s+".>", api+"CONSUMER.DELETE."+s+".>", "$JS.FC."+s+".>")
	}
	return out
}

// writeKV is putting, creating, updating, deleting and purging keys of
// buckets: NATS cannot tell these apart, all publish to the key's subject.
func writeKV(buckets ...string) []string {
	var out []string
	for _, b := range buckets {
		out = append(out, "$KV."+b+".>")
	}
	return out
}

// manageStreams is creating and updating the task stream and every
// bucket's stream (streams.Ensure), and reading their info.
func manageStreams() []string {
	names := []string{wire.TaskStream}
	for _, b := range streams.Buckets(streams.Options{}) {
		names = append(names, kvStream(b.Bucket))
	}
	var out []string
	for _, n := range names {
		out = append(out, api+"STREAM.CREATE."+n, api+"STREAM.UPDATE."+n, api+"STREAM.INFO."+n)
	}
	return out
}

// The task stream's API subjects.
var (
	taskStreamInfo  = api + "STREAM.INFO." + wire.TaskStream
	taskStreamPurge = api + "STREAM.PURGE." + wire.TaskStream
	// Creating (and updating: the same subject) and deleting a job's
	// task consumer, and reading its info.
	taskConsumers = []string{
		api + "CONSUMER.CREATE." + wire.TaskStream + ".>",
		api + "CONSUMER.DELETE." + wire.TaskStream + ".*",
		api + "CONSUMER.INFO." + wire.TaskStream + ".*",
	}
	// Pulling a job's tasks and acking them (the server's ack subjects
	// name the stream and consumer).
	taskPull = []string{
		api + "CONSUMER.INFO." + wire.TaskStream + ".*",
		api + "CONSUMER.MSG.NEXT." + wire.TaskStream + ".*",
		"$JS.ACK." + wire.TaskStream + ".>",
	}
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

// Controller is `sluice controller`'s role.
func Controller() Role {
	return Role{
		Name:        "controller",
		InboxPrefix: controllerInbox,
		Publish: join(
			[]string{apiInfo, taskStreamPurge},
			manageStreams(),
			taskConsumers,
			readKV(wire.JobsBucket, wire.StatusBucket, wire.LeasesBucket, wire.ReadersBucket, wire.DispatchBucket, wire.PlansBucket),
			writeKV(wire.JobsBucket, wire.StatusBucket, wire.LeasesBucket, wire.DispatchBucket, wire.PlansBucket),
		),
		Subscribe: join([]string{inbox(controllerInbox), wire.ResultSubjects, wire.DemandSubjects}),
	}
}

// Agent is `sluice agent`'s role (the trainer agent and its dispatcher).
func Agent() Role {
	return Role{
		Name:        "agent",
		InboxPrefix: agentInbox,
		Publish: join(
			[]string{apiInfo, wire.ResultSubjects, wire.DemandSubjects},
			taskPull,
			readKV(wire.JobsBucket, wire.DispatchBucket, wire.ReadersBucket),
			writeKV(wire.ReadersBucket),
		),
		Subscribe: []string{inbox(agentInbox)},
	}
}

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

func cliPublish() []string {
	return join(
		[]string{apiInfo, taskStreamInfo, taskStreamPurge, wire.TaskSubjects},
		taskConsumers,
		readKV(wire.JobsBucket, wire.StatusBucket, wire.LeasesBucket, wire.ReadersBucket, wire.DispatchBucket,
			wire.SweepsBucket, wire.PlansBucket),
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

// Roles are every role, in the order the configuration lists them.
func Roles() []Role { return []Role{Controller(), Agent(), CLI(), Admin()} }
