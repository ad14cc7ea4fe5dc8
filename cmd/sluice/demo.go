package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-project/sluice/cmd/sluice/internal/demo"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/internal/httpserve"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newDemoFlags(args, stderr)
	if err := f.parse(args); err != nil {
		return err
	}
	d := f.opts
	var err error
	if d.Pipeline, err = pipelineDocument(d.Pipeline); err != nil {
		return err
	}
	if f.exeErr != nil {
		return fmt.Errorf("finding the sluice binary for replicas: %w", f.exeErr)
	}
	logger := newLogger(stderr, *f.logLevel)

	reg := prometheus.NewRegistry()
	if *f.metricsAddr != "" {
		ln, err := net.Listen("tcp", *f.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", *f.metricsAddr, err)
		}
		hs := httpserve.New(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), httpserve.Options{WriteTimeout: httpserve.OpsWriteTimeout, Logger: logger})
		go hs.Serve(ln)
		defer hs.Close()
	}

	status := newStatusLine(stderr)
	sum, err := demo.Run(ctx, d, logger, reg, status.show)
	status.end()
	if err != nil {
		return err
	}
	if *f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sum); err != nil {
			return err
		}
	} else {
		sum.WriteText(stdout)
	}
	return demoVerdict(sum)
}

// demoFlags are the flags of `sluice demo`: demo.Options, whose Validate
// is their one check, and the command's own.
type demoFlags struct {
	fs                    *flag.FlagSet
	opts                  demo.Options
	seed                  *uint64
	cacheFlags            cacheFlags
	asJSON                *bool
	metricsAddr, logLevel *string
	exeErr                error
}

func newDemoFlags(args []string, stderr io.Writer) *demoFlags {
	dataset := "image"
	for i, a := range args { // the dataset picks the other flags' defaults
		switch {
		case (a == "--dataset" || a == "-dataset") && i+1 < len(args):
			dataset = args[i+1]
		case strings.HasPrefix(a, "--dataset="), strings.HasPrefix(a, "-dataset="):
			dataset = a[strings.IndexByte(a, '=')+1:]
		}
	}
	f := &demoFlags{opts: demo.DatasetDefaults(dataset), fs: newFlagSet("demo", stderr)}
	d, fs := &f.opts, f.fs
	fs.StringVar(&d.Dataset, "dataset", d.Dataset, "synthetic dataset: image (WebDataset tar shards of JPEGs), text (JSONL shards: one passage and its label a line), tabular (Criteo .tsv shards) or lm (the text dataset through lm-pretrain: BPE with a byte-level tokenizer.json, packed into rows of 2048; a sample is a row)")
	fs.StringVar(&d.Pipeline, "pipeline", d.Pipeline, "pipeline: a built-in name (default: the dataset's), a YAML/JSON spec file, or an inline spec")
	fs.IntVar(&d.Samples, "samples", d.Samples, "samples in the synthetic dataset")
	fs.IntVar(&d.Shards, "shards", d.Shards, "shards the dataset is split into")
	fs.IntVar(&d.Epochs, "epochs", d.Epochs, "epochs to train")
	fs.IntVar(&d.BatchSize, "batch-size", d.BatchSize, "samples per training batch")
	f.seed = fs.Uint64("seed", d.Seed, "seed of the dataset, the shard order and the augmentations")
	fs.DurationVar(&d.StepTime, "step-time", d.StepTime, "simulated GPU time per batch")
	fs.IntVar(&d.MaxReplicas, "max-replicas", d.MaxReplicas, "most function replicas the autoscaler may run")
	fs.DurationVar(&d.ChaosKillEvery, "chaos-kill-every", 0, "SIGKILL a random function replica at this period (0: never)")
	fs.IntVar(&d.ChaosKillMidShard, "chaos-kill-mid-shard", 0, "SIGKILL a random function replica this many times, each as a shard's first chunk is published")
	fs.IntVar(&d.Corrupt, "corrupt", d.Corrupt, "samples to write with a broken JPEG (reported as failed samples)")
	fs.StringVar(&d.DataDir, "data-dir", "", "JetStream store directory (default: a temporary one, removed at exit)")
	fs.IntVar(&d.ChunkMaxBytes, "chunk-max-bytes", d.ChunkMaxBytes, "largest output chunk message")
	f.cacheFlags = registerCacheFlags(fs, " of the replicas")
	f.asJSON = fs.Bool("json", false, "print the summary as one JSON object on stdout")
	f.metricsAddr = fs.String("metrics-addr", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9090)")
	f.logLevel = fs.String("log-level", "warn", "log level: debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice demo [flags]\n\nRuns one training job end to end on embedded NATS JetStream and S3:\n"+
			"function replicas start from zero, scale with the trainer's demand and end at zero.\n\n")
		fs.PrintDefaults()
	}
	return f
}

// parse parses args into f.opts and checks them with demo.Options.Validate.
// The replicas are this binary's `fn serve`; not finding it is reported
// after the flags' problems.
func (f *demoFlags) parse(args []string) error {
	exe, err := os.Executable()
	f.exeErr = err
	f.opts.ReplicaCommand = []string{exe, "fn", "serve"}
	if err := parse(f.fs, args,
		func() error { return f.opts.Validate() }, // after Parse filled f.opts
		oneOf("log-level", f.logLevel, logLevels...),
		f.cacheFlags.resolve(&f.opts.Cache),
	); err != nil {
		return err
	}
	f.opts.Seed = *f.seed
	return nil
}

// demoVerdict fails a run whose summary lists problems (nothing delivered,
// samples lost or duplicated), so that its exit status says so.
func demoVerdict(sum demo.Summary) error {
	if p := sum.Problems(); len(p) > 0 {
		return fmt.Errorf("job %s failed: %s", sum.Job, strings.Join(p, "; "))
	}
	return nil
}

// statusLine refreshes one line in place on a terminal and prints a line
// every few seconds elsewhere (CI logs), so progress is visible either way.
type statusLine struct {
	w        io.Writer
	tty      bool
	lastLine time.Time
	shown    bool
}

func newStatusLine(w io.Writer) *statusLine {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &statusLine{w: w, tty: tty}
}

func (s *statusLine) show(p demo.Progress) {
	if s.tty {
		fmt.Fprintf(s.w, "\r\033[K%s", p.Line())
		s.shown = true
		return
	}
	if time.Since(s.lastLine) >= 5*time.Second {
		fmt.Fprintln(s.w, p.Line())
		s.lastLine = time.Now()
	}
}

func (s *statusLine) end() {
	if s.tty && s.shown {
		fmt.Fprintln(s.w)
	}
}

// pipelineDocument turns --pipeline into what a job carries: a built-in
// name as it is, or a spec's text (from a file, a pipe or the flag
// itself), validated here so that every error in it is reported before
// anything starts. Files a spec names are not read here: the replicas'
// vocab directory is the demo's to write (the lm dataset's tokenizer).
func pipelineDocument(value string) (string, error) {
	_, doc, err := loadPipelineFlag(value, pipeline.CheckOnly())
	if err != nil {
		return "", err
	}
	if doc == "" {
		return value, nil
	}
	return doc, nil
}
