package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/functions/shardcache"
)

func runPlan(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", stderr)
	datasetBytes := fs.String("dataset-bytes", "", "the dataset's size (e.g. 150GiB)")
	samples := fs.Int64("samples", 0, "samples in the dataset")
	shards := fs.Int("shards", 0, "shards in the dataset")
	epochs := fs.Int("epochs", 1, "epochs of the job")
	replicas := fs.Int("replicas", 1, "function replicas")
	cacheBytes := fs.String("cache-bytes", "0", "shard cache over all nodes (the sum of their --cache-bytes)")
	s3Rate := fs.String("s3-rate", "", "one replica's S3 read rate per second (e.g. 80MiB)")
	s3Total := fs.String("s3-total-rate", "0", "all replicas' S3 read rate per second together; 0: no cap")
	s3Latency := fs.Duration("s3-latency", 20*time.Millisecond, "one S3 request's time to first byte")
	cacheRate := fs.String("cache-rate", "1GiB", "one replica's read rate per second from its cache")
	decodeRate := fs.Float64("decode-rate", 0, "samples one replica preprocesses per second (sluice bench ops: samples_per_s_per_core x its cores)")
	asJSON := fs.Bool("json", false, "print the prediction as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice plan [flags]\n\nPredicts a job's S3 bytes per epoch with the shard cache, and the I/O-bound\n"+
			"ceiling on samples/s, from the dataset's size, the cache and measured rates.\n\n")
		fs.PrintDefaults()
	}
	in := shardcache.ModelInputs{}
	size := func(name string, v *string, dst *int64) func() error {
		return func() error {
			n, err := broker.ParseSize(*v)
			if err != nil {
				return fmt.Errorf("--%s %q: %v", name, *v, err)
			}
			*dst = n
			return nil
		}
	}
	var s3R, s3T, cacheR int64
	if err := parse(fs, args,
		size("dataset-bytes", datasetBytes, &in.DatasetBytes),
		size("cache-bytes", cacheBytes, &in.CacheBytes),
		size("s3-rate", s3Rate, &s3R),
		size("s3-total-rate", s3Total, &s3T),
		size("cache-rate", cacheRate, &cacheR),
		intRange("epochs", epochs, 1, 100000),
		intRange("replicas", replicas, 1, 100000),
		intRange("shards", shards, 1, 100_000_000),
	); err != nil {
		return err
	}
	in.Samples, in.Shards, in.Epochs, in.Replicas = *samples, *shards, *epochs, *replicas
	in.S3BytesPerS, in.S3TotalBytesPerS, in.CacheBytesPerS = float64(s3R), float64(s3T), float64(cacheR)
	in.S3Latency, in.DecodePerS = *s3Latency, *decodeRate
	p, err := shardcache.Predict(in)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Inputs     shardcache.ModelInputs `json:"inputs"`
			Prediction shardcache.Prediction  `json:"prediction"`
		}{in, p})
	}
	printPlan(stdout, in, p)
	return nil
}

func printPlan(w io.Writer, in shardcache.ModelInputs, p shardcache.Prediction) {
	fmt.Fprintf(w, "%d epochs of %s (%d samples in %d shards) on %d replicas; the cache of %s keeps %.0f%% of the dataset\n\n",
		in.Epochs, broker.FormatSize(in.DatasetBytes), in.Samples, in.Shards, in.Replicas,
		broker.FormatSize(in.CacheBytes), 100*p.CachedFraction)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EPOCH\tS3 READ\tCACHE READ\tI/O TIME\tI/O CEILING\tDECODE CEILING\tBOUND")
	// Epochs after the first are alike: one row for a run of equal ones.
	for e := 0; e < len(p.Epochs); {
		ep, last := p.Epochs[e], e
		for last+1 < len(p.Epochs) && p.Epochs[last+1] == ep {
			last++
		}
		label := fmt.Sprint(e)
		if last > e {
			label = fmt.Sprintf("%d-%d", e, last)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1fs\t%.0f/s\t%.0f/s\t%.0f/s\n", label, broker.FormatSize(ep.S3Bytes), broker.FormatSize(ep.CacheBytes),
			ep.IOSeconds, ep.IOCeiling, ep.DecodeCeiling, ep.Bound)
		e = last + 1
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nS3 in all: %s, %.2fx the dataset (%dx without a cache)\n", broker.FormatSize(p.S3Bytes), p.S3Ratio, in.Epochs)
}
