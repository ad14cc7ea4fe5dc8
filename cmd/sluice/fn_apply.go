package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/wire"
)

// Metadata keys of the file `sluice fn apply` writes, beside wire.MetaKeys
// and wire.MetaEpoch (as in chunks).
const (
	metaPipeline     = "pipeline"
	metaPipelineSpec = "pipeline_spec" // the spec file's text, when one was given
	metaSeed         = "seed"
	metaFailed       = "failed" // how many samples failed
)

func runFnApply(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFnApplyFlags(stderr)
	if err := f.parse(args); err != nil {
		return err
	}
	if *f.list {
		writeCatalog(stdout)
		return nil
	}
	p, specText, err := loadPipelineFlag(*f.name, pipeline.Options{MaxPixels: *f.maxPixels, DecodeBudget: image.BudgetFor(f.memLimit),
		VocabDir: *f.vocabDir})
	if err != nil {
		return err
	}
	st, failed, err := f.apply(ctx, p, stderr)
	if err != nil {
		return err
	}
	meta := map[string]string{
		metaPipeline:   p.Name(),
		metaSeed:       strconv.FormatUint(*f.seed, 10),
		wire.MetaEpoch: strconv.Itoa(*f.epoch),
		metaFailed:     strconv.Itoa(failed),
	}
	if specText != "" {
		meta[metaPipelineSpec] = specText
	}
	tensors, err := st.encode(meta)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*f.output, tensors, 0o644); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	if *f.asJSON {
		return json.NewEncoder(stdout).Encode(st.report(p.Name(), *f.output, failed))
	}
	fmt.Fprintf(stdout, "wrote %d samples (%d failed) through %s to %s: %s\n", len(st.keys), failed, p.Name(), *f.output, st.describe())
	return nil
}

// applyReport is what `sluice fn apply --json` prints.
type applyReport struct {
	Pipeline string        `json:"pipeline"`
	Output   string        `json:"output"`
	Samples  int           `json:"samples"`
	Failed   int           `json:"failed"`
	Tensors  []applyTensor `json:"tensors"`
}

// applyTensor is one tensor of the file written: a field of the
// pipeline's output, stacked over the samples.
type applyTensor struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
}

func (s *stacker) report(pipelineName, output string, failed int) applyReport {
	r := applyReport{Pipeline: pipelineName, Output: output, Samples: len(s.keys), Failed: failed, Tensors: []applyTensor{}}
	for _, f := range s.schema {
		r.Tensors = append(r.Tensors, applyTensor{Name: f.Name, DType: fmt.Sprint(f.DType), Shape: append([]int{len(s.keys)}, f.Shape...)})
	}
	return r
}

// fnApplyFlags are the flags of `sluice fn apply`.
type fnApplyFlags struct {
	fs                                     *flag.FlagSet
	name, input, output, vocabDir          *string
	seed                                   *uint64
	epoch, maxPixels, maxMember, maxSample *int
	maxSampleMembers, limit                *int
	memFlag                                memoryLimitFlag
	memLimit                               int64
	list, asJSON                           *bool
}

func newFnApplyFlags(stderr io.Writer) *fnApplyFlags {
	fset := newFlagSet("fn apply", stderr)
	f := &fnApplyFlags{fs: fset}
	f.name = fset.String("pipeline", "", "built-in pipeline ("+strings.Join(pipeline.Names(), ", ")+"), a YAML/JSON spec file, or an inline spec")
	f.input = fset.String("input", "", acceptedInputs)
	f.output = fset.String("output", "", "safetensors file to write")
	f.seed = fset.Uint64("seed", 0, "job seed the per-sample seeds derive from")
	f.epoch = fset.Int("epoch", 0, "epoch the per-sample seeds derive from")
	f.maxPixels = fset.Int("max-pixels", image.DefaultMaxPixels, "largest image accepted, in pixels")
	f.maxMember = fset.Int("max-member-bytes", wds.DefaultMaxMemberBytes, "largest file or tar member accepted")
	f.maxSample = fset.Int("max-sample-bytes", wds.DefaultMaxSampleBytes, "largest tar sample accepted, its members together")
	f.maxSampleMembers = fset.Int("max-sample-members", wds.DefaultMaxSampleMembers, "most members a tar sample may have")
	f.limit = fset.Int("limit", 0, "stop after this many samples (0: all)")
	f.memFlag = registerMemoryLimitFlag(fset)
	f.vocabDir = fset.String("vocab-dir", "", "the only directory WordPiece vocab and BPE tokenizer files are read from (a spec names a file within it); empty: builtin only")
	f.asJSON = fset.Bool("json", false, "print the report (samples written and failed, the tensors) as one JSON object")
	f.list = fset.Bool("list", false, "list the built-in pipelines and the ops with their parameters, and exit")
	fset.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice fn apply --pipeline NAME|FILE --input PATH --output OUT.safetensors [--seed N] [--epoch N]\n\n"+
			"Runs a pipeline locally, as a function replica would, and writes every sample's\n"+
			"output stacked into one safetensors file (tensors named as in chunks; metadata:\n"+
			"keys, pipeline, seed, epoch). Failed samples are listed on stderr.\n\n"+
			"Labels: a sample without one (a lone JPEG, images without .cls files) gets -1.\n"+
			"A directory of class subfolders is read as torchvision's ImageFolder: each\n"+
			"image's label is its folder's index among all subfolders sorted by name.\n\n")
		fset.PrintDefaults()
	}
	return f
}

func (f *fnApplyFlags) parse(args []string) error {
	required := func(flag string, v *string) func() error {
		return func() error {
			if *v == "" && !*f.list {
				return fmt.Errorf("--%s is required", flag)
			}
			return nil
		}
	}
	return parse(f.fs, args,
		required("pipeline", f.name), required("input", f.input), required("output", f.output),
		intRange("epoch", f.epoch, 0, 1<<30),
		intRange("max-pixels", f.maxPixels, 1, 1<<31-1),
		intRange("max-member-bytes", f.maxMember, 1, 1<<30),
		intRange("max-sample-bytes", f.maxSample, 1, 1<<31-1),
		intRange("max-sample-members", f.maxSampleMembers, 1, 1<<20),
		intRange("limit", f.limit, 0, 1<<31-1),
		f.memFlag.resolve(&f.memLimit, new(string)),
	)
}

// apply runs p over every sample of --input (up to --limit), reporting
// each failed sample on stderr, and stacks the outputs.
func (f *fnApplyFlags) apply(ctx context.Context, p pipeline.Pipeline, stderr io.Writer) (*stacker, int, error) {
	st := newStacker()
	failed := 0
	fail := func(key, reason string) {
		failed++
		fmt.Fprintf(stderr, "failed %s: %s\n", key, reason)
	}
	// A packing pipeline gives documents: they are packed over the whole
	// input, in the order read, as a replica packs a shard.
	var pk *pipeline.Packer
	if po, ok := pipeline.PackingOf(p); ok {
		base := filepath.Base(filepath.Clean(*f.input))
		var err error
		if pk, err = pipeline.NewPacker(po, strings.TrimSuffix(base, filepath.Ext(base))); err != nil {
			return nil, 0, err
		}
	}
	addRows := func(rows []pipeline.Output) {
		for _, r := range rows {
			if err := st.add(r.Key, r); err != nil {
				fail(r.Key, err.Error())
			}
		}
	}
	docs := 0
	errLimit := errors.New("limit reached")
	walker := inputWalker{maxMember: int64(*f.maxMember), fail: fail,
		tarLimits: wds.Limits{MaxMemberBytes: int64(*f.maxMember), MaxSampleBytes: int64(*f.maxSample), MaxSampleMembers: *f.maxSampleMembers},
		note:      func(msg string) { fmt.Fprintf(stderr, "note: %s\n", msg) }}
	walker.fn = func(s wds.Sample) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if *f.limit > 0 && len(st.keys)+docs+failed >= *f.limit {
			return errLimit
		}
		out, err := p.Process(s, pipeline.SampleSeed(*f.seed, *f.epoch, s.Key))
		if err != nil {
			fail(s.Key, err.Error())
			return nil
		}
		if pk != nil {
			ids, err := pipeline.DocIDs(out)
			if err != nil {
				fail(s.Key, err.Error())
				return nil
			}
			docs++
			pk.Add(ids)
			addRows(pk.Take())
			return nil
		}
		if err := st.add(s.Key, out); err != nil {
			fail(s.Key, err.Error())
		}
		return nil
	}
	if err := walker.walk(*f.input); err != nil && !errors.Is(err, errLimit) {
		return nil, 0, err
	}
	if pk != nil {
		addRows(pk.Close())
		ps := pk.Stats()
		fmt.Fprintf(stderr, "packed %d documents (%d tokens) into %d rows, %d padding tokens, %d dropped\n", ps.Docs, ps.Tokens, ps.Rows, ps.Pad, ps.Dropped)
	}
	if failed+len(st.keys)+docs == 0 {
		return nil, 0, fmt.Errorf("--input %s holds no samples: want %s", *f.input, acceptedInputs)
	}
	if failed > 0 {
		read := len(st.keys) // samples; when packing, documents (the rows are not read)
		if pk != nil {
			read = docs
		}
		fmt.Fprintf(stderr, "%d of %d samples failed\n", failed, failed+read)
	}
	if len(st.keys) == 0 {
		return nil, 0, fmt.Errorf("no sample of %s succeeded (%d failed); nothing written", *f.input, failed)
	}
	return st, failed, nil
}

// stacker stacks sample outputs into one tensor per field, as a chunk
// does; every sample must have the first one's fields.
type stacker struct {
	keys   []string
	schema []pipeline.Field // Data unused
	data   [][]byte
}

func newStacker() *stacker { return &stacker{} }

func (s *stacker) add(key string, o pipeline.Output) error {
	if s.schema == nil {
		for _, f := range o.Fields {
			s.schema = append(s.schema, pipeline.Field{Name: f.Name, DType: f.DType, Shape: f.Shape})
		}
		s.data = make([][]byte, len(o.Fields))
	}
	same := len(o.Fields) == len(s.schema)
	for i := 0; same && i < len(o.Fields); i++ {
		f, w := o.Fields[i], s.schema[i]
		same = f.Name == w.Name && f.DType == w.DType && slices.Equal(f.Shape, w.Shape)
	}
	if !same {
		return fmt.Errorf("output %s differs from the first sample's %s: samples of one file must stack (end the pipeline with a fixed-size op)",
			describeFields(o.Fields, 0), describeFields(s.schema, 0))
	}
	for i, f := range o.Fields {
		s.data[i] = append(s.data[i], f.Data...)
	}
	s.keys = append(s.keys, key)
	return nil
}

func (s *stacker) encode(meta map[string]string) ([]byte, error) {
	keys, err := json.Marshal(s.keys)
	if err != nil {
		return nil, fmt.Errorf("encoding keys: %w", err)
	}
	meta[wire.MetaKeys] = string(keys)
	tensors := make([]safetensors.Tensor, len(s.schema))
	for i, f := range s.schema {
		tensors[i] = safetensors.Tensor{Name: f.Name, DType: f.DType, Shape: append([]int{len(s.keys)}, f.Shape...), Data: s.data[i]}
	}
	b, err := safetensors.Encode(tensors, meta)
	if err != nil {
		return nil, fmt.Errorf("encoding output: %w", err)
	}
	return b, nil
}

func (s *stacker) describe() string { return describeFields(s.schema, len(s.keys)) }

// describeFields writes fields as "image U8[224 224 3], label I64[]",
// with a leading batch dimension n when n > 0.
func describeFields(fields []pipeline.Field, n int) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		shape := f.Shape
		if n > 0 {
			shape = append([]int{n}, shape...)
		}
		parts[i] = fmt.Sprintf("%s %s%v", f.Name, f.DType, shape)
	}
	return strings.Join(parts, ", ")
}

// writeCatalog lists the built-in pipelines and every op's parameters.
func writeCatalog(w io.Writer) {
	fmt.Fprintln(w, "Built-in pipelines:")
	for _, d := range pipeline.Builtins() {
		fmt.Fprintf(w, "  %-16s %s\n", d.Name, d.Doc)
	}
	fmt.Fprintln(w, "\nOps (input -> output):")
	for _, op := range pipeline.Ops() {
		in := make([]string, len(op.In))
		for i, t := range op.In {
			in[i] = string(t)
		}
		out := string(op.Out)
		if op.OutFor != nil {
			out = strings.Join(outputsOf(op), " | ")
		}
		fmt.Fprintf(w, "  %s (%s -> %s)\n      %s\n", op.Name, strings.Join(in, " | "), out, op.Doc)
		for _, p := range op.Params {
			allowed := ""
			if a := p.Allowed(); a != string(p.Type) {
				allowed = a + ": "
			}
			def := "default " + defaultText(p.Default)
			if p.Required {
				def = "required"
			}
			fmt.Fprintf(w, "      %-18s %-14s %-22s %s%s\n", p.Name, p.Type, def, allowed, p.Doc)
		}
	}
	fmt.Fprintln(w, "\nA spec file (YAML or JSON):\n  name: my-train\n  label: {member: cls}\n  ops:\n    - decode\n"+
		"    - {op: random_resized_crop, size: 224}\n    - {op: random_horizontal_flip, p: 0.5}\n    - {op: normalize, dtype: f16}")
}

// outputsOf lists what an op whose output depends on its parameters can
// give, trying each allowed value of its string parameters.
func outputsOf(op pipeline.OpSpec) []string {
	var outs []string
	for _, p := range op.Params {
		for _, v := range p.Values {
			params := pipeline.Params{}
			for _, q := range op.Params {
				params[q.Name] = q.Default
			}
			params[p.Name] = v
			if t := string(op.Output(params)); !slices.Contains(outs, t) {
				outs = append(outs, t)
			}
		}
	}
	return outs
}

func defaultText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
