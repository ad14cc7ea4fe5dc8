package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	f := newPlanFlags(stderr)
	in, conn, err := f.parse(args)
	if err != nil {
		return err
	}
	var rp *replicaPlan
	if *f.trainerRate > 0 {
		p, err := planReplicas(ctx, conn, *f.pipelineName, *f.dataset, *f.trainerRate, *f.perReplica)
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		rp = &p
	}
	if !f.cacheModel() {
		if *f.asJSON {
			return printJSON(stdout, struct {
				Replicas *replicaPlan `json:"replicas"`
			}{rp})
		}
		printReplicaPlan(stdout, *rp)
		return nil
	}
	p, err := shardcache.Predict(in)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if *f.asJSON {
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

// planFlags are the flags of `sluice plan`.
type planFlags struct {
	fs                                  *flag.FlagSet
	nflags                              *connect.Flags
	pipelineName, dataset               *string
	trainerRate, perReplica, decodeRate *float64
	datasetBytes, cacheBytes            *string
	s3Rate, s3Total, cacheRate          *string
	samples                             *int64
	shards, epochs, replicas            *int
	s3Latency                           *time.Duration
	asJSON                              *bool
}

func newPlanFlags(stderr io.Writer) *planFlags {
	fs := newFlagSet("plan", stderr)
	f := &planFlags{fs: fs}
	f.pipelineName = fs.String("pipeline", "", "the job's pipeline: a built-in name or a spec (as the job carries it); with --trainer-rate, its learned per-replica rate sizes the replicas")
	f.dataset = fs.String("dataset", "", "the job's s3:// dataset URL: a rate learned on it is preferred to the pipeline's over every dataset")
	f.trainerRate = fs.Float64("trainer-rate", 0, "samples/s the trainer eats at full speed: estimate the replicas it needs")
	f.perReplica = fs.Float64("per-replica-rate", 0, "samples/s of one replica, instead of the rate learned in the plan store (no NATS needed)")
	f.nflags = connect.Register(fs, connect.PartNATS)
	f.datasetBytes = fs.String("dataset-bytes", "", "the dataset's size (e.g. 150GiB)")
	f.samples = fs.Int64("samples", 0, "samples in the dataset")
	f.shards = fs.Int("shards", 0, "shards in the dataset")
	f.epochs = fs.Int("epochs", 1, "epochs of the job")
	f.replicas = fs.Int("replicas", 1, "function replicas")
	f.cacheBytes = fs.String("cache-bytes", "0", "shard cache over all nodes (the sum of their --cache-bytes)")
	f.s3Rate = fs.String("s3-rate", "", "one replica's S3 read rate per second (e.g. 80MiB)")
	f.s3Total = fs.String("s3-total-rate", "0", "all replicas' S3 read rate per second together; 0: no cap")
	f.s3Latency = fs.Duration("s3-latency", 20*time.Millisecond, "one S3 request's time to first byte")
	f.cacheRate = fs.String("cache-rate", "1GiB", "one replica's read rate per second from its cache")
	f.decodeRate = fs.Float64("decode-rate", 0, "samples one replica preprocesses per second (sluice bench ops: samples_per_s_per_core x its cores)")
	f.asJSON = fs.Bool("json", false, "print the prediction as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice plan [flags]\n\nWith --trainer-rate: the replicas a job needs, ceil(trainer rate / per-replica rate),\n"+
			"with the per-replica rate the controllers learned for --pipeline (and --dataset) in the\n"+
			"plan store, or --per-replica-rate. With --dataset-bytes: the job's S3 bytes per epoch with\n"+
			"the shard cache, and the I/O-bound ceiling on samples/s, from the dataset's size, the cache\n"+
			"and measured rates.\n\n")
		fs.PrintDefaults()
	}
	return f
}

// cacheModel says whether the cache model is asked for: by --dataset-bytes,
// or by the absence of --trainer-rate.
func (f *planFlags) cacheModel() bool { return *f.datasetBytes != "" || *f.trainerRate == 0 }

// parse parses args into the cache model's inputs and the NATS
// connection (resolved only where the plan store is read).
func (f *planFlags) parse(args []string) (shardcache.ModelInputs, connect.Config, error) {
	in := shardcache.ModelInputs{}
	var conn connect.Config
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
	onlyCache := func(check func() error) func() error {
		return func() error {
			if !f.cacheModel() {
				return nil
			}
			return check()
		}
	}
	if err := parse(f.fs, args,
		f.checkRates,
		func() error {
			if *f.trainerRate > 0 && *f.perReplica == 0 {
				return resolve(f.nflags, &conn)()
			}
			return nil
		},
		onlyCache(size("dataset-bytes", f.datasetBytes, &in.DatasetBytes)),
		onlyCache(size("cache-bytes", f.cacheBytes, &in.CacheBytes)),
		onlyCache(size("s3-rate", f.s3Rate, &s3R)),
		onlyCache(size("s3-total-rate", f.s3Total, &s3T)),
		onlyCache(size("cache-rate", f.cacheRate, &cacheR)),
		intRange("epochs", f.epochs, 1, 100000),
		intRange("replicas", f.replicas, 1, 100000),
		onlyCache(intRange("shards", f.shards, 1, 100_000_000)),
	); err != nil {
		return in, conn, err
	}
	in.Samples, in.Shards, in.Epochs, in.Replicas = *f.samples, *f.shards, *f.epochs, *f.replicas
	in.S3BytesPerS, in.S3TotalBytesPerS, in.CacheBytesPerS = float64(s3R), float64(s3T), float64(cacheR)
	in.S3Latency, in.DecodePerS = *f.s3Latency, *f.decodeRate
	return in, conn, nil
}

// checkRates checks the replica estimate's flags.
func (f *planFlags) checkRates() error {
	switch {
	case *f.trainerRate < 0:
		return fmt.Errorf("--trainer-rate %v: want > 0 samples/s", *f.trainerRate)
	case *f.perReplica < 0:
		return fmt.Errorf("--per-replica-rate %v: want > 0 samples/s", *f.perReplica)
	case *f.trainerRate > 0 && *f.perReplica == 0 && *f.pipelineName == "":
		return errors.New("--trainer-rate: want --pipeline (its learned rate) or --per-replica-rate")
	}
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
