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
		"agent":     {"feed a job's batches to a trainer over HTTP, resuming after a restart", runAgent},
		"demo":      {"run a whole elastic training job on embedded NATS and S3", runDemo},
		"fn serve":  {"serve preprocessing functions as a CloudEvents HTTP endpoint", runFnServe},
		"fn apply":  {"run a pipeline on local files or a tar shard and write safetensors", runFnApply},
		"bench ops": {"measure a pipeline's single-core throughput, per op", runBenchOps},
		"version":   {"print the version", func(_ context.Context, _ []string, out, _ io.Writer) error { fmt.Fprintln(out, version); return nil }},
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
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	for n := min(2, len(args)); n >= 1; n-- {
		name := strings.Join(args[:n], " ")
		if c, ok := cmds[name]; ok {
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
	if len(args) > 0 && args[0] != "help" && args[0] != "-h" && args[0] != "--help" {
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", strings.Join(args, " "))
		usage(stderr, cmds)
		return 2
	}
	usage(stdout, cmds)
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "Usage: sluice <command> [flags]\n\nCommands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'sluice <command> -h' for a command's flags.")
}
