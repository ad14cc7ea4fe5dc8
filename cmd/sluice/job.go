package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/jobspec"
	"github.com/sluice-project/sluice/wire"
)

// jobConn is a job command's connection settings (internal/connect):
// NATS and the stream replicas for all, S3 for submit, which lists the
// dataset.
type jobConn struct {
	flags *connect.Flags
	conn  connect.Config
	s3    bool
	// js is connect's JetStream context, for what else the command reads
	// beside the broker (the sweep's planner).
	js jetstream.JetStream
	// log takes warnings (a NATS cluster not answering yet, retried; a
	// permissions violation) to the command's stderr.
	log *slog.Logger
}

func newJobConn(fs *flag.FlagSet, withS3 bool) *jobConn {
	parts := connect.PartNATS | connect.PartStreams
	if withS3 {
		parts |= connect.PartS3
	}
	return &jobConn{flags: connect.Register(fs, parts), s3: withS3, log: newLogger(fs.Output(), "warn")}
}

// resolve is the parse check that merges flags, SLUICE_* environment and
// config file.
func (c *jobConn) resolve() func() error { return resolve(c.flags, &c.conn) }

// connect returns a broker and what closes its connection. Submit's has
// an S3 client, checked first so that wrong credentials say so.
func (c *jobConn) connect(ctx context.Context) (*broker.Broker, func(), error) {
	nc, js, err := connectAs(ctx, c.conn, natsperm.CLI(), "sluice-job", c.log)
	if err != nil {
		return nil, nil, err
	}
	var s3c *s3.Client
	if c.s3 {
		if s3c, err = c.conn.S3Client(ctx, nil); err == nil {
			err = connect.CheckS3(ctx, s3c, nil)
		}
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("checking s3: %w", err)
		}
	}
	c.js = js
	return broker.New(js, s3c, c.conn.Streams(), c.log).WithSpecCheck(jobspec.Check), nc.Close, nil
}

// parseArgs parses flags placed before, between or after the positional
// arguments (`sluice job status ID --watch`), wants between least and most
// of them, named by what, and runs checks as parse does: every problem is
// printed at once.
func parseArgs(fs *flag.FlagSet, args []string, least, most int, what string, checks ...func() error) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	count := func() error {
		switch {
		case len(pos) < least:
			return fmt.Errorf("want %s", what)
		case len(pos) > most:
			return fmt.Errorf("unexpected argument %q (want %s)", pos[most], what)
		}
		return nil
	}
	return pos, parse(fs, nil, append([]func() error{count}, checks...)...)
}

// printJSON writes v indented, with a final newline.
func printJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

func runJobSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("job submit", stderr)
	conn := newJobConn(fs, true)
	var f wire.JobSpec
	fs.StringVar(&f.ID, "id", "", "job `id`: 1-64 characters of [A-Za-z0-9_-]")
	fs.StringVar(&f.Dataset, "dataset", "", "dataset: the s3://bucket/prefix/ `URL` holding the shards")
	pipelineFlag := fs.String("pipeline", "", "pipeline: a built-in `name` ("+strings.Join(pipeline.Names(), ", ")+") or a YAML/JSON spec file")
	fs.IntVar(&f.Epochs, "epochs", 0, "epochs")
	fs.Uint64Var(&f.Seed, "seed", 0, "seed of the shard order and the augmentations")
	fs.IntVar(&f.BatchSize, "batch-size", 0, "samples per training batch")
	fs.IntVar(&f.MinReplicas, "min-replicas", 0, "function replicas kept while the job has work")
	fs.IntVar(&f.MaxReplicas, "max-replicas", 0, "most function replicas for the job (0: the controller's cap)")
	fs.Float64Var(&f.Weight, "weight", 0, "share of the replica capacity against other jobs (default 1)")
	outputBuffer := fs.String("output-buffer", "", "most bytes of output an agent holds for the readers it serves: a `size` such as 2GiB (default 1GiB)")
	var readers stringList
	fs.Var(&readers, "reader", "a reader of the job's output, by `name` (repeat for several; default one, "+wire.DefaultReader+")")
	asJSON := fs.Bool("json", false, "print the job record as JSON")
	vocabDir := fs.String("vocab-dir", "", "also build the pipeline with the vocab and tokenizer files in `DIR` (the replicas' --vocab-dir, or a copy of it), "+
		"so that a file they could not use (a tokenizer.json with an unsupported component) is refused here rather than by the first replica")
	keyFile := fs.String("team-key-file", "", "`FILE` to write the job's team key to, which every agent of the job needs (it connects to NATS as the job with it; a team's agents sign their messages with it) "+
		"(default: the job's file in $"+wire.TeamKeyDirEnv+", else in sluice/teamkeys of the user's config directory)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice job submit [FILE.yaml] [flags]\n\n"+
			"Checks a job spec, lists its dataset's shards, and queues one task per shard per epoch.\n"+
			"Flags override the file's fields; without a file the flags are the whole spec.\n"+
			"Nothing is created when anything is wrong.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 0, 1, "at most one job spec file", conn.resolve())
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	f.Readers = readers
	file := ""
	if len(pos) == 1 {
		file = pos[0]
	}
	spec, err := submittedSpec(file, set, f, *pipelineFlag, *outputBuffer)
	if err != nil {
		return err
	}
	if *vocabDir != "" {
		// The broker's check reads no file a spec names (they are the
		// replicas'); this one builds the pipeline as a replica would.
		if _, err := pipeline.Lookup(spec.Pipeline, pipeline.Options{VocabDir: *vocabDir}); err != nil {
			return fmt.Errorf("--vocab-dir %s: %w", *vocabDir, err)
		}
	}

	b, closeConn, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	// The key's hash goes in the record (the controller lets the job's
	// agents in with it); the key is written once the job is: a refused
	// submit (an ID in use) must not replace the running job's key.
	keyText := wire.NewTeamKey()
	key, err := wire.ParseTeamKey(keyText)
	if err != nil {
		return err
	}
	job, err := b.Submit(ctx, spec, broker.WithTeamKey(key))
	if err != nil {
		return err
	}
	keyPath, keyErr := writeTeamKey(*keyFile, job.Spec.ID, keyText)
	if *asJSON {
		if err := printJSON(stdout, job); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "job %s submitted: %d shards x %d epochs = %d tasks, pipeline %s, readers %s\n",
			job.Spec.ID, len(job.Shards), job.Spec.Epochs, job.Tasks(), pipelineName(job.Spec.Pipeline), strings.Join(job.Spec.Readers, ", "))
		for i, src := range job.Sources {
			fmt.Fprintf(stdout, "  source %d: %s, weight %g: %d shards of an epoch (%d listed)\n",
				i, job.Spec.Sources[i].Dataset, job.Spec.Sources[i].Weight, src.Slots, src.Listed)
		}
	}
	if keyErr != nil {
		return fmt.Errorf("job %s submitted, but its team key was not written, and its agents cannot connect without it: delete the job and submit it again: %w",
			job.Spec.ID, keyErr)
	}
	fmt.Fprintf(stderr, "team key: %s (readable by you only): the job's agents connect to NATS with it; one on another node needs a copy: --team-key-file FILE or $%s\n",
		keyPath, wire.TeamKeyFileEnv)
	return nil
}

// writeTeamKey writes job's team key to file (default: the job's
// file in the key directory), readable by its owner only, and returns
// where.
func writeTeamKey(file, job string, key []byte) (string, error) {
	if file == "" {
		dir, err := teamKeyDir()
		if err != nil {
			return "", err
		}
		file = wire.TeamKeyPath(dir, job)
	}
	if err := writeSecretFile(file, key); err != nil {
		return "", fmt.Errorf("writing the team key: %w", err)
	}
	return file, nil
}

// submittedSpec is the spec `job submit` sends: the file's, if any, with
// the flags given (set) over it, f holding their values. It is checked
// before anything connects, every problem of the file and the flags at
// once.
func submittedSpec(file string, set map[string]bool, f wire.JobSpec, pipelineValue, outputBuffer string) (wire.JobSpec, error) {
	var flagProbs []jobspec.Problem
	failed := map[string]bool{} // fields whose flag could not be read
	if set["pipeline"] {
		// Checked as the broker checks it: a file the spec names is the
		// replicas' (--vocab-dir checks it, below).
		_, doc, err := loadPipelineFlag(pipelineValue, pipeline.CheckOnly())
		if err != nil {
			flagProbs = append(flagProbs, jobspec.Problem{Message: err.Error()})
			failed["pipeline"], set["pipeline"] = true, false
		}
		f.Pipeline = cmp.Or(doc, pipelineValue)
	}
	if set["output-buffer"] {
		n, err := bytesize.Parse(outputBuffer)
		if err != nil {
			flagProbs = append(flagProbs, jobspec.Problem{Message: fmt.Sprintf("--output-buffer %q: %v", outputBuffer, err)})
			failed["output_buffer_bytes"], set["output-buffer"] = true, false
		}
		f.OutputBufferBytes = n
	}
	override := flagsOver(set, f)
	var spec wire.JobSpec
	var err error
	if file != "" {
		data, rerr := os.ReadFile(file)
		if rerr != nil {
			return spec, fmt.Errorf("reading job spec: %w", rerr)
		}
		spec, err = jobspec.ParseWith(data, override)
	} else {
		override(&spec)
		// Checked as a file would be, before connecting.
		err = jobspec.Check(spec.WithDefaults())
	}
	if err == nil && len(flagProbs) == 0 {
		return spec, nil
	}
	return spec, flagProblems(file, set, failed, spec.ID, flagProbs, err)
}

// flagsOver sets on a spec the fields whose flags were given (set, by flag
// name), to their values in f: the flags given, over the file.
func flagsOver(set map[string]bool, f wire.JobSpec) func(*wire.JobSpec) {
	return func(s *wire.JobSpec) {
		if set["id"] {
			s.ID = f.ID
		}
		if set["dataset"] {
			s.Dataset = f.Dataset
		}
		if set["pipeline"] {
			s.Pipeline = f.Pipeline
		}
		if set["epochs"] {
			s.Epochs = f.Epochs
		}
		if set["seed"] {
			s.Seed = f.Seed
		}
		if set["batch-size"] {
			s.BatchSize = f.BatchSize
		}
		if set["min-replicas"] {
			s.MinReplicas = f.MinReplicas
		}
		if set["max-replicas"] {
			s.MaxReplicas = f.MaxReplicas
		}
		if set["weight"] {
			s.Weight = f.Weight
		}
		if set["output-buffer"] {
			s.OutputBufferBytes = f.OutputBufferBytes
		}
		if set["reader"] {
			s.Readers = f.Readers
		}
	}
}

// flagProblems is the error of a spec from file (or from the flags alone)
// that failed: the flags' own problems, then the spec's (err), each named
// by the flag it came from; fields whose flag failed are said once.
func flagProblems(file string, set, failed map[string]bool, id string, flagProbs []jobspec.Problem, err error) error {
	se := &jobspec.Error{Job: id, Problems: flagProbs}
	var specErr *jobspec.Error
	if errors.As(err, &specErr) {
		for _, p := range specErr.Problems {
			if failed[p.Field] {
				continue // unset because its flag failed: said already
			}
			if name, ok := specFlags[p.Field]; ok && p.Line == 0 && (file == "" || set[name]) {
				p.Field = "--" + name // the value came from this flag
			}
			se.Problems = append(se.Problems, p)
		}
	}
	if file != "" {
		return fmt.Errorf("%s: %w", file, se)
	}
	return se
}

// specFlags are the submit flags that set a job spec's fields, by field.
var specFlags = map[string]string{"id": "id", "dataset": "dataset", "pipeline": "pipeline", "epochs": "epochs",
	"seed": "seed", "batch_size": "batch-size", "min_replicas": "min-replicas", "max_replicas": "max-replicas",
	"weight": "weight", "output_buffer_bytes": "output-buffer", "readers": "reader"}

// stringList is a flag that may be repeated.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// pipelineName is what a job's pipeline is called in a line: its name, or
// the name an inline spec gives.
func pipelineName(p string) string {
	if strings.TrimSpace(p) == "" {
		return "each source's own"
	}
	if slices.Contains(pipeline.Names(), p) {
		return p
	}
	if d, err := pipeline.ParseDefinition([]byte(p)); err == nil && d.Name != "" {
		return d.Name + " (inline)"
	}
	return "custom (inline)"
}

// jobStatusJSON is what `sluice job status --json` prints: the record and
// the live status, null until a controller writes one.
type jobStatusJSON struct {
	Job    wire.Job        `json:"job"`
	Status *wire.JobStatus `json:"status"`
}

func statusJSON(job wire.Job, st wire.JobStatus) jobStatusJSON {
	out := jobStatusJSON{Job: job}
	if broker.HasStatus(st) {
		out.Status = &st
	}
	return out
}

func runJobStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("job status", stderr)
	conn := newJobConn(fs, false)
	watch := fs.Bool("watch", false, "print again at every change until the job ends; exit 1 unless it succeeded")
	asJSON := fs.Bool("json", false, "print {\"job\": record, \"status\": live status or null} as JSON (one line per change with --watch)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice job status ID [--watch] [--json]\n\n"+
			"Shows a job's state and progress: tasks per epoch, samples, readers, replicas, failed shards.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, 1, "a job id", conn.resolve())
	if err != nil {
		return err
	}
	b, closeConn, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	if !*watch {
		job, st, err := b.Status(ctx, pos[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, statusJSON(job, st))
		}
		printStatus(stdout, job, st)
		return nil
	}
	var last wire.Job
	enc := json.NewEncoder(stdout)
	view := newWatchView(stdout)
	err = b.Watch(ctx, pos[0], func(job wire.Job, st wire.JobStatus) error {
		last = job
		if *asJSON {
			return enc.Encode(statusJSON(job, st))
		}
		view.show(job, st)
		return nil
	})
	view.end()
	if err != nil && ctx.Err() != nil {
		return nil // interrupted: the watcher stopped watching, the job goes on
	}
	if err != nil {
		return err
	}
	if last.State != wire.JobSucceeded {
		reason := ""
		if last.Reason != "" {
			reason = ": " + last.Reason
		}
		return fmt.Errorf("job %s %s%s", last.Spec.ID, last.State, reason)
	}
	return nil
}

func runJobList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("job list", stderr)
	conn := newJobConn(fs, false)
	asJSON := fs.Bool("json", false, "print the job records as a JSON array")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice job list [--json]\n\nLists the jobs, oldest submission first.\n\n")
		fs.PrintDefaults()
	}
	if _, err := parseArgs(fs, args, 0, 0, "no arguments", conn.resolve()); err != nil {
		return err
	}
	b, closeConn, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	jobs, err := b.List(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		if jobs == nil {
			jobs = []wire.Job{}
		}
		return printJSON(stdout, jobs)
	}
	rows := make([]listRow, 0, len(jobs))
	for _, j := range jobs {
		row := listRow{job: j}
		if _, st, err := b.Status(ctx, j.Spec.ID); err == nil && broker.HasStatus(st) {
			row.status = &st
		}
		rows = append(rows, row)
	}
	printList(stdout, rows)
	return nil
}

func runJobCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("job cancel", stderr)
	conn := newJobConn(fs, false)
	reason := fs.String("reason", "cancelled with sluice job cancel", "why, kept in the job record as its `reason`")
	asJSON := fs.Bool("json", false, "print the job record as JSON")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice job cancel ID [--reason TEXT] [--json]\n\n"+
			"Stops a queued or running job: its tasks, its task consumer and its dispatch plan are removed\n"+
			"(its agents stop); its record stays, cancelled, until `sluice job delete`. Needs no controller\n"+
			"running.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, 1, "a job id", conn.resolve())
	if err != nil {
		return err
	}
	b, closeConn, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	job, err := b.Cancel(ctx, pos[0], *reason)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, job)
	}
	fmt.Fprintf(stdout, "job %s cancelled\n", job.Spec.ID)
	return nil
}

func runJobDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("job delete", stderr)
	conn := newJobConn(fs, false)
	force := fs.Bool("force", false, "cancel a queued or running job first instead of refusing")
	asJSON := fs.Bool("json", false, `print {"id": ID, "deleted": true} as JSON`)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sluice job delete ID [--force] [--json]\n\n"+
			"Removes a finished job and everything of it: record, status, lease, reader positions,\n"+
			"dispatch plan, tasks and task consumer. A queued or running job is refused unless --force.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, 1, "a job id", conn.resolve())
	if err != nil {
		return err
	}
	b, closeConn, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	if err := b.Delete(ctx, pos[0], *force); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, map[string]any{"id": pos[0], "deleted": true})
	}
	fmt.Fprintf(stdout, "job %s deleted\n", pos[0])
	return nil
}
