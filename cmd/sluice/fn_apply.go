package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
	fset := newFlagSet("fn apply", stderr)
	name := fset.String("pipeline", "", "built-in pipeline ("+strings.Join(pipeline.Names(), ", ")+"), a YAML/JSON spec file, or an inline spec")
	input := fset.String("input", "", acceptedInputs)
	output := fset.String("output", "", "safetensors file to write")
	seed := fset.Uint64("seed", 0, "job seed the per-sample seeds derive from")
	epoch := fset.Int("epoch", 0, "epoch the per-sample seeds derive from")
	maxPixels := fset.Int("max-pixels", image.DefaultMaxPixels, "largest image accepted, in pixels")
	maxMember := fset.Int("max-member-bytes", wds.DefaultMaxMemberBytes, "largest file or tar member accepted")
	maxSample := fset.Int("max-sample-bytes", wds.DefaultMaxSampleBytes, "largest tar sample accepted, its members together")
	maxSampleMembers := fset.Int("max-sample-members", wds.DefaultMaxSampleMembers, "most members a tar sample may have")
	limit := fset.Int("limit", 0, "stop after this many samples (0: all)")
	memFlag := registerMemoryLimitFlag(fset)
	vocabDir := fset.String("vocab-dir", "", "the only directory WordPiece vocab files are read from (a spec names a file within it); empty: builtin only")
	list := fset.Bool("list", false, "list the built-in pipelines and the ops with their parameters, and exit")
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
	required := func(flag string, v *string) func() error {
		return func() error {
			if *v == "" && !*list {
				return fmt.Errorf("--%s is required", flag)
			}
			return nil
		}
	}
	var memLimit int64
	if err := parse(fset, args,
		required("pipeline", name), required("input", input), required("output", output),
		intRange("epoch", epoch, 0, 1<<30),
		intRange("max-pixels", maxPixels, 1, 1<<31-1),
		intRange("max-member-bytes", maxMember, 1, 1<<30),
		intRange("max-sample-bytes", maxSample, 1, 1<<31-1),
		intRange("max-sample-members", maxSampleMembers, 1, 1<<20),
		intRange("limit", limit, 0, 1<<31-1),
		memFlag.resolve(&memLimit, new(string)),
	); err != nil {
		return err
	}
	if *list {
		writeCatalog(stdout)
		return nil
	}

	p, specText, err := loadPipelineFlag(*name, pipeline.Options{MaxPixels: *maxPixels, DecodeBudget: image.BudgetFor(memLimit),
		VocabDir: *vocabDir})
	if err != nil {
		return err
	}
	st := newStacker()
	failed := 0
	fail := func(key, reason string) {
		failed++
		fmt.Fprintf(stderr, "failed %s: %s\n", key, reason)
	}
	errLimit := errors.New("limit reached")
	walker := inputWalker{maxMember: int64(*maxMember), fail: fail,
		tarLimits: wds.Limits{MaxMemberBytes: int64(*maxMember), MaxSampleBytes: int64(*maxSample), MaxSampleMembers: *maxSampleMembers},
		note:      func(msg string) { fmt.Fprintf(stderr, "note: %s\n", msg) }}
	walker.fn = func(s wds.Sample) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if *limit > 0 && len(st.keys)+failed >= *limit {
			return errLimit
		}
		out, err := p.Process(s, pipeline.SampleSeed(*seed, *epoch, s.Key))
		if err != nil {
			fail(s.Key, err.Error())
			return nil
		}
		if err := st.add(s.Key, out); err != nil {
			fail(s.Key, err.Error())
		}
		return nil
	}
	if err := walker.walk(*input); err != nil && !errors.Is(err, errLimit) {
		return err
	}
	if failed+len(st.keys) == 0 {
		return fmt.Errorf("--input %s holds no samples: want %s", *input, acceptedInputs)
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "%d of %d samples failed\n", failed, failed+len(st.keys))
	}
	if len(st.keys) == 0 {
		return fmt.Errorf("no sample of %s succeeded (%d failed); nothing written", *input, failed)
	}
	meta := map[string]string{
		metaPipeline:   p.Name(),
		metaSeed:       strconv.FormatUint(*seed, 10),
		wire.MetaEpoch: strconv.Itoa(*epoch),
		metaFailed:     strconv.Itoa(failed),
	}
	if specText != "" {
		meta[metaPipelineSpec] = specText
	}
	tensors, err := st.encode(meta)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*output, tensors, 0o644); err != nil {
		return fmt.Errorf("writing output: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %d samples (%d failed) through %s to %s: %s\n", len(st.keys), failed, p.Name(), *output, st.describe())
	return nil
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
			fmt.Fprintf(w, "      %-18s %-14s default %-14s %s%s\n", p.Name, p.Type, defaultText(p.Default), allowed, p.Doc)
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
