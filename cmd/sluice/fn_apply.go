package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/internal/lines"
	"github.com/sluice-project/sluice/internal/safetensors"
	"github.com/sluice-project/sluice/internal/wds"
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
	input := fset.String("input", "", "a sample file (image, .txt, .json; .jsonl or .tsv: one sample a line), a directory of them, or a .tar shard")
	output := fset.String("output", "", "safetensors file to write")
	seed := fset.Uint64("seed", 0, "job seed the per-sample seeds derive from")
	epoch := fset.Int("epoch", 0, "epoch the per-sample seeds derive from")
	maxPixels := fset.Int("max-pixels", image.DefaultMaxPixels, "largest image accepted, in pixels")
	maxMember := fset.Int("max-member-bytes", wds.DefaultMaxMemberBytes, "largest file or tar member accepted")
	limit := fset.Int("limit", 0, "stop after this many samples (0: all)")
	list := fset.Bool("list", false, "list the built-in pipelines and the ops with their parameters, and exit")
	fset.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice fn apply --pipeline NAME|FILE --input PATH --output OUT.safetensors [--seed N] [--epoch N]\n\n"+
			"Runs a pipeline locally, as a function replica would, and writes every sample's\n"+
			"output stacked into one safetensors file (tensors named as in chunks; metadata:\n"+
			"keys, pipeline, seed, epoch). Failed samples are listed on stderr.\n\n")
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
	if err := parse(fset, args,
		required("pipeline", name), required("input", input), required("output", output),
		intRange("epoch", epoch, 0, 1<<30),
		intRange("max-pixels", maxPixels, 1, 1<<31-1),
		intRange("max-member-bytes", maxMember, 1, 1<<30),
		intRange("limit", limit, 0, 1<<31-1),
	); err != nil {
		return err
	}
	if *list {
		writeCatalog(stdout)
		return nil
	}

	p, specText, err := loadPipelineFlag(*name, pipeline.Options{MaxPixels: *maxPixels})
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
	err = eachSample(*input, int64(*maxMember), func(s wds.Sample) error {
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
	}, fail)
	if err != nil && !errors.Is(err, errLimit) {
		return err
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

// eachSample calls fn with every sample of path, in a stable order: a tar
// shard's in its order; a directory's by file name, files sharing a name
// up to the extension making one sample (a.jpg + a.cls); the lines of a
// .jsonl or .tsv file keyed as a line shard's are. Samples that cannot be
// read go to fail. fn's error stops the walk and is returned.
func eachSample(path string, maxMember int64, fn func(wds.Sample) error, fail func(key, reason string)) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("--input: %w", err)
	}
	if !info.IsDir() {
		return eachFileSample(path, filepath.Base(path), maxMember, fn, fail)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return fmt.Errorf("reading input directory: %w", err)
	}
	// Group plain files by key; line and tar files are samples of their own.
	type group struct {
		key   string
		files []string // names in the directory
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		key, ext := splitExt(e.Name())
		if isContainer(ext) {
			groups = append(groups, &group{key: e.Name(), files: []string{e.Name()}})
			continue
		}
		g := byKey[key]
		if g == nil {
			g = &group{key: key}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.files = append(g.files, e.Name())
	}
	slices.SortStableFunc(groups, func(a, b *group) int { return strings.Compare(a.key, b.key) })
	for _, g := range groups {
		if _, ext := splitExt(g.files[0]); isContainer(ext) {
			if err := eachFileSample(filepath.Join(path, g.files[0]), g.files[0], maxMember, fn, fail); err != nil {
				return err
			}
			continue
		}
		s := wds.Sample{Key: g.key, Files: map[string][]byte{}}
		bad := ""
		for _, name := range g.files {
			_, ext := splitExt(name)
			data, err := readCapped(filepath.Join(path, name), maxMember)
			if err != nil {
				bad = err.Error()
				break
			}
			if _, dup := s.Files[ext]; dup {
				bad = fmt.Sprintf("two files with member %s (names differ only in case)", ext)
				break
			}
			s.Files[ext] = data
		}
		if bad != "" {
			fail(g.key, bad)
			continue
		}
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}

// eachFileSample reads one file: a tar shard, a line file, or one sample.
func eachFileSample(path, name string, maxMember int64, fn func(wds.Sample) error, fail func(key, reason string)) error {
	key, ext := splitExt(name)
	if !isContainer(ext) {
		data, err := readCapped(path, maxMember)
		if err != nil {
			fail(key, err.Error())
			return nil
		}
		return fn(wds.Sample{Key: key, Files: map[string][]byte{ext: data}})
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening input: %w", err)
	}
	defer f.Close()
	next := wds.NewReader(f, maxMember).Next
	if ext != "tar" {
		next = lines.NewReader(f, name, ext, int(maxMember)).Next
	}
	for {
		s, err := next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		var se *wds.SampleError
		if errors.As(err, &se) {
			fail(se.Key, se.Reason)
			continue
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if err := fn(s); err != nil {
			return err
		}
	}
}

// splitExt splits a file name at its last dot; the extension, lowercased,
// names the member ("photo.JPG" is member jpg of sample "photo").
func splitExt(name string) (key, ext string) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 {
		return name, ""
	}
	return name[:i], strings.ToLower(name[i+1:])
}

// isContainer reports whether files with this extension hold many samples.
func isContainer(ext string) bool { return ext == "tar" || ext == "jsonl" || ext == "tsv" }

func readCapped(path string, max int64) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.Size() > max {
		return nil, fmt.Errorf("file %s is %d bytes, over the %d-byte cap", filepath.Base(path), info.Size(), max)
	}
	return os.ReadFile(path)
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
