package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/cmd/sluice/internal/demo"
	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/internal/slowlink"
)

// cacheRun is one configuration of `sluice bench cache` and what it gave.
type cacheRun struct {
	Name    string                `json:"name"`
	Cache   shardcache.Config     `json:"cache"`
	Summary demo.Summary          `json:"summary"`
	Model   shardcache.Prediction `json:"model"`
}

func runBenchCache(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := demo.DatasetDefaults("text")
	fs := newFlagSet("bench cache", stderr)
	fs.IntVar(&d.Samples, "samples", 20000, "samples in the synthetic text dataset")
	fs.IntVar(&d.Shards, "shards", 24, "shards the dataset is split into")
	fs.IntVar(&d.Epochs, "epochs", 3, "epochs of each job")
	replicas := fs.Int("replicas", 2, "function replicas of each job (fixed)")
	latency := fs.Duration("s3-latency", 50*time.Millisecond, "latency the slow S3 link adds to each request")
	rate := fs.String("s3-rate", "1MiB", "bandwidth of the slow S3 link per second, all replicas together")
	small := fs.Float64("too-small", 0.25, "the too-small cache's size, as a fraction of the dataset")
	asJSON := fs.Bool("json", false, "print the runs as JSON")
	logLevel := fs.String("log-level", "error", "log level: "+fmt.Sprint(logLevels))
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice bench cache [flags]\n\nRuns the same job three times side by side on embedded NATS and S3, the replicas\n"+
			"reading S3 through a slow loopback link: without a shard cache, with one the dataset fits in,\n"+
			"and with one too small for it; reports S3 bytes, epoch times and deliveries.\n\n")
		fs.PrintDefaults()
	}
	var linkRate int64
	if err := parse(fs, args,
		intRange("samples", &d.Samples, 1, 1_000_000),
		intRange("shards", &d.Shards, 1, 10_000),
		intRange("epochs", &d.Epochs, 2, 100),
		intRange("replicas", replicas, 1, 16),
		durationRange("s3-latency", latency, 0, 10*time.Second),
		func() error {
			n, err := bytesize.Parse(*rate)
			if err != nil || n <= 0 {
				return fmt.Errorf("--s3-rate %q: %v", *rate, errOr(err, "want > 0"))
			}
			linkRate = n
			return nil
		},
		func() error {
			if *small <= 0 || *small >= 1 {
				return fmt.Errorf("--too-small %v: want between 0 and 1", *small)
			}
			return nil
		},
		oneOf("log-level", logLevel, logLevels...),
	); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the sluice binary for replicas: %w", err)
	}
	d.ReplicaCommand = []string{exe, "fn", "serve"}
	d.StepTime = 0 // the trainer eats as fast as it is fed: the epochs measure I/O
	d.MinReplicas, d.MaxReplicas = *replicas, *replicas
	d.SlowS3 = slowlink.Options{Latency: *latency, BytesPerS: linkRate}
	logger := newLogger(stderr, *logLevel)

	tmp, err := os.MkdirTemp("", "sluice-bench-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	runs := []*cacheRun{{Name: "none"}, {Name: "fits"}, {Name: "too small"}}
	for i, r := range runs {
		switch r.Name {
		case "fits":
			ds := runs[0].Summary.DatasetBytes
			r.Cache = shardcache.Config{Dir: fmt.Sprintf("%s/%d", tmp, i), DiskBytes: 2 * ds, MemoryBytes: ds}
		case "too small":
			r.Cache = shardcache.Config{Dir: fmt.Sprintf("%s/%d", tmp, i), DiskBytes: int64(*small * float64(runs[0].Summary.DatasetBytes))}
		}
		fmt.Fprintf(stderr, "bench cache: run %q ...\n", r.Name)
		if err := r.run(ctx, d, logger); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(runs)
	}
	printBenchCache(stdout, d, *replicas, *latency, linkRate, runs)
	return nil
}

// run runs the job with r.Cache, and models what it should have read.
func (r *cacheRun) run(ctx context.Context, d demo.Options, logger *slog.Logger) error {
	o := d
	o.Cache = r.Cache
	sum, err := demo.Run(ctx, o, logger, prometheus.NewRegistry(), nil)
	if err != nil {
		return fmt.Errorf("run %q: %w", r.Name, err)
	}
	if p := sum.Problems(); len(p) > 0 {
		return fmt.Errorf("run %q: %s", r.Name, strings.Join(p, "; "))
	}
	r.Summary = sum
	cacheBytes := min(r.Cache.DiskBytes, 2*sum.DatasetBytes) // the disk holds what the replicas share
	r.Model, err = shardcache.Predict(shardcache.ModelInputs{DatasetBytes: sum.DatasetBytes, Samples: int64(d.Samples),
		Shards: d.Shards, Epochs: d.Epochs, Replicas: d.MaxReplicas, CacheBytes: cacheBytes,
		S3BytesPerS: float64(d.SlowS3.BytesPerS), S3TotalBytesPerS: float64(d.SlowS3.BytesPerS), S3Latency: d.SlowS3.Latency,
		CacheBytesPerS: 1 << 30, DecodePerS: 1e9})
	return err
}

func printBenchCache(w io.Writer, d demo.Options, replicas int, latency time.Duration, rate int64, runs []*cacheRun) {
	ds := runs[0].Summary.DatasetBytes
	fmt.Fprintf(w, "%d epochs of %d samples (%s in %d shards), %d replicas, S3 behind a link of %s/s and %v latency\n\n",
		d.Epochs, d.Samples, bytesize.Format(ds), d.Shards, replicas, bytesize.Format(rate), latency)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "CACHE\tS3 READ\tMODEL"
	for e := range d.Epochs {
		head += fmt.Sprintf("\tEPOCH %d", e)
	}
	fmt.Fprintln(tw, head+"\tHITS (MEMORY)\tDELIVERED\tDUPLICATES\tLOST")
	for _, r := range runs {
		s := r.Summary
		size := "none"
		if r.Cache.DiskBytes > 0 {
			size = bytesize.Format(r.Cache.DiskBytes)
		}
		line := fmt.Sprintf("%s (%s)\t%.2fx\t%.2fx", r.Name, size, float64(s.S3LinkBytes)/float64(ds), r.Model.S3Ratio)
		for e := range d.Epochs {
			if e < len(s.EpochS) {
				line += fmt.Sprintf("\t%.2fs", s.EpochS[e])
			} else {
				line += "\t-"
			}
		}
		line += fmt.Sprintf("\t%d/%d (%d)\t%d/%d\t%d\t%d", s.CacheHits, s.CacheHits+s.CacheMisses, s.CacheMemoryHits,
			s.SamplesDelivered, s.SamplesExpected, s.Duplicates, s.Lost)
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, r := range runs[1:] {
		var parts []string
		for e := 1; e < d.Epochs && e < len(r.Summary.EpochS) && e < len(runs[0].Summary.EpochS); e++ {
			parts = append(parts, fmt.Sprintf("epoch %d %.2fx", e, runs[0].Summary.EpochS[e]/r.Summary.EpochS[e]))
		}
		fmt.Fprintf(w, "speed-up of %q over no cache: %s\n", r.Name, strings.Join(parts, ", "))
	}
	fmt.Fprintln(w, "\nS3 READ counts the bytes through the link, over the dataset's; MODEL is sluice plan's prediction.")
	fmt.Fprintln(w, "I/O ceiling (sluice plan) against the measured samples/s per epoch:")
	for _, r := range runs {
		var parts []string
		for e, ep := range r.Model.Epochs {
			if e < len(r.Summary.EpochS) {
				parts = append(parts, fmt.Sprintf("epoch %d %.0f/s (measured %.0f/s)", e, ep.IOCeiling, float64(d.Samples)/r.Summary.EpochS[e]))
			}
		}
		fmt.Fprintf(w, "  %-9s %s\n", r.Name, strings.Join(parts, ", "))
	}
}
