// Command sluice is Sluice's one binary: the demo on embedded defaults, the
// function server that Knative (or the local actuator) runs, and tools.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand; run gets the arguments after its name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"agent":               {"feed a job's batches to a trainer over HTTP, resuming after a restart", runAgent},
		"demo":                {"run a whole elastic training job on embedded NATS and S3", runDemo},
		"fn serve":            {"serve preprocessing functions as a CloudEvents HTTP endpoint", runFnServe},
		"fn apply":            {"run a pipeline on local files or a tar shard and write safetensors", runFnApply},
		"bench cache":         {"measure the shard cache: one job without a cache, with one it fits in and with one too small, S3 behind a slow link", runBenchCache},
		"bench ops":           {"measure a pipeline's single-core throughput, per op", runBenchOps},
		"plan":                {"estimate a job's replicas for a trainer rate (learned per-replica rates), its S3 bytes per epoch with the shard cache and its I/O-bound samples/s", runPlan},
		"loadtest trace":      {"simulate the Alibaba PAI GPU cluster trace: static CPUs per task against Sluice's pooled, autoscaled replicas", runLoadtestTrace},
		"controller":          {"run jobs: autoscale replicas, tell agents where to send tasks, track status (leases let a standby take over)", runController},
		"kube-jobs":           {"reconcile SluiceJob objects (Kubernetes) into the job store: submit, status, cancel and remove on delete", runKubeJobs},
		"job submit":          {"check a job spec (YAML file and/or flags) and queue the job", runJobSubmit},
		"job status":          {"show a job's state and progress (--watch follows it)", runJobStatus},
		"job list":            {"list the jobs", runJobList},
		"job cancel":          {"stop a queued or running job and release its tasks", runJobCancel},
		"loadtest cluster":    {"simulate bursty sweeps on a GPU cluster under every scaling policy: trainer stall against preprocessing cores reserved", runLoadtestCluster},
		"loadtest sweep":      {"run a bursty sweep on this machine under each scaling policy and measure stall and replica CPU", runLoadtestSweep},
		"sweep submit":        {"submit a sweep's trials: trials fed the same samples share one job, pre-warmed", runSweepSubmit},
		"sweep status":        {"show a sweep's jobs and each trial's progress", runSweepStatus},
		"job delete":          {"remove a finished job and all it has (--force: a running one)", runJobDelete},
		"job node-credential": {"derive a node's credential from the job's team key (a file for that node's agent: it can act as that node only)", runJobNodeCredential},
		"nats callout-key":    {"make the key pair of the NATS auth callout that lets each job's agents in as their job (seed to a file, public key printed)", runNATSCalloutKey},
		"version":             {"print the version", func(_ context.Context, _ []string, out, _ io.Writer) error { fmt.Fprintln(out, version); return nil }},
	}
}

// hiddenCommands are run like commands but left out of the usage: a
// tool's own helper processes.
func hiddenCommands() map[string]command {
	return map[string]command{
		// The controller `loadtest sweep` starts, with a baseline sizing
		// its replicas (flags the production controller does not have).
		"loadtest controller": {"run the load test's controller", runLoadtestController},
	}
}

var version = "dev" // set with -ldflags "-X main.version=..."

func main() {
	ctx, stop := signalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// signalContext ends on SIGINT or SIGTERM (Knative's and the local
// actuator's way to stop a replica).
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// run resolves the longest matching subcommand ("fn serve" before "fn").
// A first word that only starts commands ("fn", "bench") lists them.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds, hidden := commands(), hiddenCommands()
	for n := min(2, len(args)); n >= 1; n-- {
		name := strings.Join(args[:n], " ")
		c, ok := cmds[name]
		if !ok {
			c, ok = hidden[name]
		}
		if ok {
			err := c.run(ctx, args[n:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				return 2
			}
			fmt.Fprintf(stderr, "sluice %s: %v\n", name, err)
			return 1
		}
	}
	help := func(i int) bool { return i >= len(args) || isHelp(args[i]) }
	if len(args) > 0 && !isHelp(args[0]) {
		if group := withPrefix(cmds, args[0]); len(group) > 0 {
			if help(1) {
				usage(stdout, args[0], group)
				return 0
			}
			fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", strings.Join(args, " "))
			usage(stderr, args[0], group)
			return 2
		}
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", strings.Join(args, " "))
		usage(stderr, "", cmds)
		return 2
	}
	usage(stdout, "", cmds)
	return 0
}

func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "--help" || arg == "-help"
}

// withPrefix is the commands whose first word is word and that have more.
func withPrefix(cmds map[string]command, word string) map[string]command {
	group := map[string]command{}
	for name, c := range cmds {
		if strings.HasPrefix(name, word+" ") {
			group[name] = c
		}
	}
	return group
}

// usage lists cmds; prefix is the command group they share, if any.
func usage(w io.Writer, prefix string, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	width := 12
	for n := range cmds {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	if prefix == "" {
		fmt.Fprintln(w, "Usage: sluice <command> [flags]\n\nCommands:")
	} else {
		fmt.Fprintf(w, "Usage: sluice %s <command> [flags]\n\nCommands:\n", prefix)
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s %s\n", width, n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'sluice <command> -h' for a command's flags.")
}
