package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/loadtest/chart"
	"github.com/sluice-project/sluice/loadtest/sweep"
)

func runLoadtestSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := sweep.DefaultOptions()
	fs := newFlagSet("loadtest sweep", stderr)
	fs.IntVar(&o.Trials, "trials", o.Trials, "trials of the sweep")
	fs.IntVar(&o.Seeds, "seeds", o.Seeds, "distinct seeds over the trials (round-robin): trials of one seed share a job")
	fs.DurationVar(&o.Arrival, "arrival", o.Arrival, "the trials arrive evenly over this time")
	fs.IntVar(&o.Samples, "samples", o.Samples, "samples in the synthetic image dataset")
	fs.IntVar(&o.Shards, "shards", o.Shards, "shards of the dataset")
	fs.IntVar(&o.MinSide, "min-side", o.MinSide, "smallest image side (pixels)")
	fs.IntVar(&o.MaxSide, "max-side", o.MaxSide, "largest image side (pixels)")
	fs.IntVar(&o.Epochs, "epochs", o.Epochs, "epochs of each trial")
	fs.IntVar(&o.BatchSize, "batch-size", o.BatchSize, "samples per batch")
	fs.DurationVar(&o.StepTime, "step-time", o.StepTime, "simulated trainer compute per step")
	fs.IntVar(&o.Lagging, "lagging", o.Lagging, "the last N trials of each run lag: their steps take --lag-factor times longer")
	fs.Float64Var(&o.LagFactor, "lag-factor", o.LagFactor, "how much longer a lagging trial's step takes")
	outputBuffer := fs.String("output-buffer", "0", "each job's output buffer, a `size` such as 2MiB (0: the default, 1GiB): what the job's agent holds for its trials; a small one makes a lagging trial hold back the other trials of its job sooner")
	fs.IntVar(&o.MaxReplicas, "max-replicas", o.MaxReplicas, "the controller's replica cap over all jobs")
	fs.IntVar(&o.JobMaxReplicas, "job-max-replicas", o.JobMaxReplicas, "one job's replica cap")
	fs.DurationVar(&o.KEDAPolling, "keda-polling-interval", o.KEDAPolling, "the keda runs' pollingInterval")
	fs.Float64Var(&o.KEDALagThreshold, "keda-lag-threshold", o.KEDALagThreshold, "the keda runs' lagThreshold")
	fs.DurationVar(&o.KPAWindow, "kpa-window", o.KPAWindow, "the kpa runs' stable window")
	fs.DurationVar(&o.SimColdStart, "sim-cold-start", o.SimColdStart, "replica cold start the trace simulator assumes when it predicts an independent sluice run's stall")
	fs.DurationVar(&o.RunTimeout, "run-timeout", o.RunTimeout, "longest one run may take")
	var names []string
	for _, r := range o.Runs {
		names = append(names, r.Name())
	}
	runs := fs.String("runs", strings.Join(names, ","), "runs, in order: sluice, keda, kpa or static:N, each optionally /independent (a job per trial) and @TRIALSxSEEDS")
	out := fs.String("out", "", "directory to write report.json, replicas.svg and stall.svg to (empty: none)")
	from := fs.String("from", "", "read the report from this report.json instead of running (to print or plot it again)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	logLevel := fs.String("log-level", "warn", "log level: "+fmt.Sprint(logLevels))
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice loadtest sweep [flags]\n\n"+
			"Runs a bursty hyperparameter sweep on this machine with real processes (embedded NATS and S3,\n"+
			"a controller, its replicas, an agent per job serving its trials, simulated trainers) once per\n"+
			"run, on the same work, and reports per run the trainers' stall, the replicas' CPU seconds,\n"+
			"time to first batch and completion times; with --out, plots of replicas and stalled trainers\n"+
			"over time.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args, oneOf("log-level", logLevel, logLevels...), func() error {
		n, err := bytesize.Parse(*outputBuffer)
		if err != nil {
			return fmt.Errorf("--output-buffer %q: %v", *outputBuffer, err)
		}
		o.OutputBufferBytes = n
		return nil
	}, func() error {
		o.Runs = nil
		var errs []error
		for _, s := range strings.Split(*runs, ",") {
			r, err := sweep.ParseCase(strings.TrimSpace(s))
			errs = append(errs, err)
			o.Runs = append(o.Runs, r)
		}
		return errors.Join(errs...)
	}); err != nil {
		return err
	}
	rep, err := sweepReport(ctx, *from, o, *logLevel, stderr)
	if err != nil {
		return err
	}
	if *out != "" {
		if err := writeSweepReport(*out, rep); err != nil {
			return err
		}
	}
	if *asJSON {
		return printJSON(stdout, rep)
	}
	rep.Print(stdout)
	return nil
}

// sweepReport reads the report from the file from, or makes the runs of o
// (when from is empty) with this binary's processes.
func sweepReport(ctx context.Context, from string, o sweep.Options, logLevel string, stderr io.Writer) (sweep.Report, error) {
	if from != "" {
		var rep sweep.Report
		data, err := os.ReadFile(from)
		if err != nil {
			return rep, fmt.Errorf("reading the report: %w", err)
		}
		if err := json.Unmarshal(data, &rep); err != nil {
			return rep, fmt.Errorf("decoding %s: %w", from, err)
		}
		return rep, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return sweep.Report{}, fmt.Errorf("finding this binary to run the processes: %w", err)
	}
	o.Command = []string{exe}
	if err := o.Validate(); err != nil {
		return sweep.Report{}, err
	}
	logger := newLogger(stderr, logLevel).With("component", "loadtest")
	began := time.Now()
	return sweep.Run(ctx, o, logger, func(line string) {
		fmt.Fprintf(stderr, "%5.0fs %s\n", time.Since(began).Seconds(), line)
	})
}

// writeSweepReport writes report.json and the two charts into dir.
func writeSweepReport(dir string, rep sweep.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), data, 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	// Each simulated run's job list, for `sluice loadtest trace --jobs`.
	for _, r := range rep.Runs {
		if r.SimJobs == nil {
			continue
		}
		data, err := yaml.Marshal(r.SimJobs)
		if err != nil {
			return fmt.Errorf("encoding run %s's job list: %w", r.Name, err)
		}
		name := "jobs-" + strings.NewReplacer("/", "-", ":", "-", "@", "-").Replace(r.Name) + ".yaml"
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	replicas, stalled := rep.Charts()
	for _, c := range []struct {
		file, title, y string
		series         []chart.Series
	}{
		{"replicas.svg", "Function replicas over time, per run", "live replicas", replicas},
		{"stall.svg", "Trainer stall so far, added over the trainers, per run", "stall (trainer-seconds)", stalled},
	} {
		f, err := os.Create(filepath.Join(dir, c.file))
		if err != nil {
			return fmt.Errorf("writing %s: %w", c.file, err)
		}
		err = chart.WriteSteps(f, c.title, "seconds since the sweep's first trial", c.y, c.series)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", c.file, err)
		}
	}
	return nil
}
