package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/jobspec"
	"github.com/sluice-project/sluice/planner"
	"github.com/sluice-project/sluice/wire"
)

func runSweepSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sweep submit", stderr)
	conn := newJobConn(fs, true)
	perReplica := fs.Float64("per-replica-rate", 0, "samples/s one replica of the sweep's pipeline makes (sluice bench ops): pre-warm each job with ceil(trainer_rate / this) replicas; 0: the rate controllers learned from earlier runs of the pipeline (sluice plan), else each job's min_replicas")
	asJSON := fs.Bool("json", false, "print the sweep record as JSON")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice sweep submit FILE.yaml [flags]\n\n"+
			"Submits a sweep's trials: trials fed the same samples (dataset, pipeline, seed, epochs)\n"+
			"share one job, a reader each, so each chunk is preprocessed once for all of them; each\n"+
			"job starts the replicas it is planned to need before its first demand signal.\n"+
			"Every trial's agent is `sluice agent --job JOB --reader TRIAL`.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, 1, "a sweep file", conn.resolve(), func() error {
		if !(*perReplica >= 0) {
			return fmt.Errorf("--per-replica-rate %v: want samples/s >= 0", *perReplica)
		}
		return nil
	})
	if err != nil {
		return err
	}
	data, err := os.ReadFile(pos[0])
	if err != nil {
		return fmt.Errorf("reading the sweep file: %w", err)
	}
	spec, err := jobspec.ParseSweep(data)
	if err != nil {
		return err
	}
	b, closeConn, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	var prewarm broker.Planner
	if *perReplica > 0 {
		rate := *perReplica
		prewarm = planner.ByRate{PerReplica: func(context.Context, wire.JobSpec) (float64, error) { return rate, nil }}
	} else {
		store, err := planner.Open(ctx, conn.js)
		if err != nil {
			return fmt.Errorf("reading learned rates (or give --per-replica-rate): %w", err)
		}
		prewarm = planner.ByRate{PerReplica: store.PerReplica}
	}
	// Each job's team key: its agents connect to NATS with it (as
	// `job submit` issues one), written once the sweep is.
	keys := map[string][]byte{}
	sw, err := b.SubmitSweep(ctx, spec, prewarm, func(job string) []byte {
		keys[job] = wire.NewTeamKey()
		k, _ := wire.ParseTeamKey(keys[job])
		return k
	})
	if err != nil {
		return err
	}
	for _, j := range sw.Jobs {
		path, err := writeTeamKey("", j.ID, keys[j.ID])
		if err != nil {
			return fmt.Errorf("sweep %s submitted, but job %s's team key was not written, and its agents cannot connect without it: %w", sw.Spec.ID, j.ID, err)
		}
		fmt.Fprintf(stderr, "team key of job %s: %s (readable by you only): its agents connect to NATS with it (--team-key-file FILE or $%s)\n",
			j.ID, path, wire.TeamKeyFileEnv)
	}
	if *asJSON {
		return printJSON(stdout, sw)
	}
	fmt.Fprintf(stdout, "sweep %s submitted: %d trials in %d jobs\n", sw.Spec.ID, len(spec.ResolvedTrials()), len(sw.Jobs))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tPREWARM\tTRIALS")
	for _, j := range sw.Jobs {
		fmt.Fprintf(tw, "%s\t%d\t%v\n", j.ID, j.Prewarm, j.Trials)
	}
	return tw.Flush()
}

func runSweepStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sweep status", stderr)
	conn := newJobConn(fs, false)
	asJSON := fs.Bool("json", false, "print the sweep and its jobs' records and status as JSON")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice sweep status ID [--json]\n\n"+
			"Shows a sweep's jobs and, per trial, its samples, stall and whether it finished.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, 1, "a sweep id", conn.resolve())
	if err != nil {
		return err
	}
	b, closeConn, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	st, err := b.Sweep(ctx, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, st)
	}
	printSweep(stdout, st)
	return nil
}

// printSweep writes a line per trial under its job's.
func printSweep(w io.Writer, st broker.SweepStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "sweep %s: %d jobs, submitted %s\n", st.Sweep.Spec.ID, len(st.Sweep.Jobs), st.Sweep.Submitted.Format("2006-01-02 15:04:05Z"))
	fmt.Fprintln(tw, "JOB\tTRIAL\tSTATE\tSAMPLES\tSTALL\tREPLICAS")
	for i, sj := range st.Sweep.Jobs {
		js := st.Jobs[i]
		if js.Job.Spec.ID == "" {
			fmt.Fprintf(tw, "%s\t\tdeleted\t\t\t\n", sj.ID)
			continue
		}
		fmt.Fprintf(tw, "%s\t\t%s\t%d\t\t%d\n", sj.ID, js.Job.State, js.Status.SamplesExpected, js.Status.Replicas)
		for _, trial := range sj.Trials {
			r := js.Status.Readers[trial]
			state := "reading"
			switch {
			case js.Done[trial]:
				state = "done"
			case r.Seen.IsZero():
				state = "waiting"
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%d\t%.0f%%\t\n", trial, state, r.SamplesDelivered, 100*r.StallFraction)
		}
	}
	_ = tw.Flush()
}
