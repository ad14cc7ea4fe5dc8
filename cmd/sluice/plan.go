package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/planner"
)

// replicaPlan is the replicas estimate of `sluice plan --trainer-rate`.
type replicaPlan struct {
	TrainerRate float64 `json:"trainer_rate"`
	Replicas    int     `json:"replicas"`
	// PerReplica is the rate used; Source says where it came from: "flag",
	// or the plan store's "dataset" or "pipeline" record (Learned).
	PerReplica float64           `json:"per_replica_per_s"`
	Source     string            `json:"source"`
	Learned    *planner.Estimate `json:"learned,omitempty"`
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", stderr)
	pipelineName := fs.String("pipeline", "", "the job's pipeline: a built-in name or a spec (as the job carries it); with --trainer-rate, its learned per-replica rate sizes the replicas")
	dataset := fs.String("dataset", "", "the job's s3:// dataset URL: a rate learned on it is preferred to the pipeline's over every dataset")
	trainerRate := fs.Float64("trainer-rate", 0, "samples/s the trainer eats at full speed: estimate the replicas it needs")
	perReplica := fs.Float64("per-replica-rate", 0, "samples/s of one replica, instead of the rate learned in the plan store (no NATS needed)")
	nflags := connect.Register(fs, connect.PartNATS)
	var conn connect.Config
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
		fmt.Fprintf(stderr, "Usage: sluice plan [flags]\n\nWith --trainer-rate: the replicas a job needs, ceil(trainer rate / per-replica rate),\n"+
			"with the per-replica rate the controllers learned for --pipeline (and --dataset) in the\n"+
			"plan store, or --per-replica-rate. With --dataset-bytes: the job's S3 bytes per epoch with\n"+
			"the shard cache, and the I/O-bound ceiling on samples/s, from the dataset's size, the cache\n"+
			"and measured rates.\n\n")
		fs.PrintDefaults()
	}
	in := shardcache.ModelInputs{}
	size := func(name string, v *string, dst *int64) func() error {
		return func() error {
			n, err := bytesize.Parse(*v)
			if err != nil {
				return fmt.Errorf("--%s %q: %v", name, *v, err)
			}
			*dst = n
			return nil
		}
	}
	var s3R, s3T, cacheR int64
	cacheModel := func() bool { return *datasetBytes != "" || *trainerRate == 0 }
	onlyCache := func(check func() error) func() error {
		return func() error {
			if !cacheModel() {
				return nil
			}
			return check()
		}
	}
	if err := parse(fs, args,
		func() error {
			switch {
			case *trainerRate < 0:
				return fmt.Errorf("--trainer-rate %v: want > 0 samples/s", *trainerRate)
			case *perReplica < 0:
				return fmt.Errorf("--per-replica-rate %v: want > 0 samples/s", *perReplica)
			case *trainerRate > 0 && *perReplica == 0 && *pipelineName == "":
				return errors.New("--trainer-rate: want --pipeline (its learned rate) or --per-replica-rate")
			}
			return nil
		},
		func() error {
			if *trainerRate > 0 && *perReplica == 0 {
				return resolve(nflags, &conn)()
			}
			return nil
		},
		onlyCache(size("dataset-bytes", datasetBytes, &in.DatasetBytes)),
		onlyCache(size("cache-bytes", cacheBytes, &in.CacheBytes)),
		onlyCache(size("s3-rate", s3Rate, &s3R)),
		onlyCache(size("s3-total-rate", s3Total, &s3T)),
		onlyCache(size("cache-rate", cacheRate, &cacheR)),
		intRange("epochs", epochs, 1, 100000),
		intRange("replicas", replicas, 1, 100000),
		onlyCache(intRange("shards", shards, 1, 100_000_000)),
	); err != nil {
		return err
	}
	var rp *replicaPlan
	if *trainerRate > 0 {
		p, err := planReplicas(ctx, conn, *pipelineName, *dataset, *trainerRate, *perReplica)
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		rp = &p
	}
	if !cacheModel() {
		if *asJSON {
			return printJSON(stdout, struct {
				Replicas *replicaPlan `json:"replicas"`
			}{rp})
		}
		printReplicaPlan(stdout, *rp)
		return nil
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
			Replicas   *replicaPlan           `json:"replicas,omitempty"`
		}{in, p, rp})
	}
	if rp != nil {
		printReplicaPlan(stdout, *rp)
		fmt.Fprintln(stdout)
	}
	printPlan(stdout, in, p)
	return nil
}

// planReplicas sizes a trainer's replicas by perReplica, or else by the
// rate learned for pipeline (on dataset) in the plan store.
func planReplicas(ctx context.Context, conn connect.Config, pipeline, dataset string, trainerRate, perReplica float64) (replicaPlan, error) {
	p := replicaPlan{TrainerRate: trainerRate, PerReplica: perReplica, Source: "flag"}
	if perReplica == 0 {
		nc, js, err := connectAs(ctx, conn, natsperm.CLI(), "sluice-plan", nil)
		if err != nil {
			return p, err
		}
		defer nc.Close()
		store, err := planner.Open(ctx, js)
		if err != nil {
			return p, err
		}
		est, err := store.Get(ctx, pipeline, dataset)
		if errors.Is(err, planner.ErrNoRate) {
			return p, fmt.Errorf("pipeline %q: no job of it has run long enough to learn its per-replica rate (give --per-replica-rate)", pipeline)
		}
		if err != nil {
			return p, err
		}
		p.PerReplica, p.Source, p.Learned = est.PerReplica, est.Source, &est
	}
	p.Replicas = planner.ReplicasFor(trainerRate, p.PerReplica)
	return p, nil
}

func printReplicaPlan(w io.Writer, p replicaPlan) {
	fmt.Fprintf(w, "replicas for a trainer at %.0f samples/s: %d (ceil(%.0f / %.1f per replica))\n", p.TrainerRate, p.Replicas, p.TrainerRate, p.PerReplica)
	switch {
	case p.Learned == nil:
		fmt.Fprintf(w, "per-replica rate: %.1f samples/s, from --per-replica-rate\n", p.PerReplica)
	default:
		where := "this pipeline on this dataset"
		if p.Source == planner.SourcePipeline {
			where = "this pipeline over every dataset (none on this one yet)"
		}
		fmt.Fprintf(w, "per-replica rate: %.1f samples/s, learned on %s: %d records over %.0f replica-seconds, the last from job %s at %s (key %s)\n",
			p.PerReplica, where, p.Learned.Observations, p.Learned.ReplicaSeconds, p.Learned.Job, p.Learned.Updated.Format(time.RFC3339), p.Learned.Key)
	}
}

func printPlan(w io.Writer, in shardcache.ModelInputs, p shardcache.Prediction) {
	fmt.Fprintf(w, "%d epochs of %s (%d samples in %d shards) on %d replicas; the cache of %s keeps %.0f%% of the dataset\n\n",
		in.Epochs, bytesize.Format(in.DatasetBytes), in.Samples, in.Shards, in.Replicas,
		bytesize.Format(in.CacheBytes), 100*p.CachedFraction)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1fs\t%.0f/s\t%.0f/s\t%.0f/s\n", label, bytesize.Format(ep.S3Bytes), bytesize.Format(ep.CacheBytes),
			ep.IOSeconds, ep.IOCeiling, ep.DecodeCeiling, ep.Bound)
		e = last + 1
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nS3 in all: %s, %.2fx the dataset (%dx without a cache)\n", bytesize.Format(p.S3Bytes), p.S3Ratio, in.Epochs)
}
