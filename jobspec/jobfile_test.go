package jobspec

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/wire"
)

// problems returns err's problems as strings, failing unless it is a
// *Error matching ErrInvalid.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var se *Error
	if !errors.As(err, &se) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v: want a *Error", err)
	}
	var out []string
	for _, p := range se.Problems {
		out = append(out, p.String())
	}
	return out
}

func TestParseReadsEveryKey(t *testing.T) {
	doc := `# a job
id: resnet-01
dataset: s3://datasets/imagenet/train/
pipeline: imagenet-train
batch_size: 256
epochs: 90
seed: 18446744073709551615
min_replicas: 1
max_replicas: 16
weight: 2.5
readers: [rank0, rank1]
chunk_max_bytes: 512KiB
output_buffer_bytes: 1.5 GiB
`
	got, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := wire.JobSpec{ID: "resnet-01", Dataset: "s3://datasets/imagenet/train/", Pipeline: "imagenet-train",
		BatchSize: 256, Epochs: 90, Seed: 1<<64 - 1, MinReplicas: 1, MaxReplicas: 16, Weight: 2.5,
		Readers: []string{"rank0", "rank1"}, ChunkMaxBytes: 512 << 10, OutputBufferBytes: 3 << 29}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}

	// JSON is YAML; sizes as integers; defaults left to Submit.
	got, err = Parse([]byte(`{"id": "j", "dataset": "s3://b/p/", "pipeline": "criteo",
		"batch_size": 8, "epochs": 1, "output_buffer_bytes": 100000000}`))
	if err != nil {
		t.Fatal(err)
	}
	want = wire.JobSpec{ID: "j", Dataset: "s3://b/p/", Pipeline: "criteo", BatchSize: 8, Epochs: 1, OutputBufferBytes: 1e8}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON spec (-want +got):\n%s", diff)
	}
}

func TestParseReportsEveryProblemAtItsLine(t *testing.T) {
	doc := `id: a.b
dataset: http://x
pipeline: nosuch
batch-size: 32
epochs: 0
weight: -1
readers:
  - a
  - a
  - b.c
chunk_max_bytes: 64 MiB
output_buffer_bytes: 1XB
seed: -4
id: again
`
	_, err := Parse([]byte(doc))
	want := []string{
		`line 1: id: "a.b": want 1-64 characters of [A-Za-z0-9_-]`,
		`line 2: dataset: "http://x": want an s3://bucket/prefix/ URL`,
		`line 3: pipeline: unknown pipeline "nosuch": known pipelines are ` + strings.Join(pipeline.Names(), ", ") + ` (or give a YAML or JSON spec)`,
		`line 4: unknown key "batch-size": did you mean "batch_size"?`,
		`line 5: epochs: 0: want 1..10000`,
		`line 6: weight: -1: want > 0 and <= 1000`,
		`line 9: readers: [1] "a": named twice`,
		`line 10: readers: [2] "b.c": want 1-64 characters of [A-Za-z0-9_-]`,
		`line 12: output_buffer_bytes: "1XB": want a byte count: an integer or a size such as 64MiB, 1GiB, 100MB`,
		`line 13: seed: -4: want an integer 0..18446744073709551615`,
		`line 14: id: set twice (first on line 1)`,
		`batch_size: not set (0: want 1..65536)`,
	}
	if diff := cmp.Diff(want, problems(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(err.Error(), `invalid job spec "a.b" (12 problems):`+"\n  line 1: id:") {
		t.Errorf("error text %q", err)
	}
}

func TestParseUnknownKeys(t *testing.T) {
	_, err := Parse([]byte("id: j\nepoch: 2\nreplicas: 3\n"))
	got := problems(t, err)
	for _, w := range []string{
		`line 2: unknown key "epoch": did you mean "epochs"?`,
		`line 3: unknown key "replicas": a job spec has id, dataset, pipeline, batch_size, epochs, seed, min_replicas, max_replicas, initial_replicas, weight, readers, chunk_max_bytes, output_buffer_bytes`,
	} {
		if !strings.Contains(strings.Join(got, "\n"), w) {
			t.Errorf("problems %q lack %q", got, w)
		}
	}
}

const inlinePipelineJob = `id: flowers
dataset: s3://data/flowers/
pipeline:
  name: flowers-eval
  label: {member: cls}
  ops:
    - decode
    - op: resize
      size: 64
    - op: center_crop
      size: 56
    - to_uint8_hwc
batch_size: 16
epochs: 2
`

func TestParseInlinePipeline(t *testing.T) {
	spec, err := Parse([]byte(inlinePipelineJob))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.Lookup(spec.Pipeline, pipeline.Options{})
	if err != nil {
		t.Fatalf("the job's pipeline document %q: %v", spec.Pipeline, err)
	}
	if p.Name() != "flowers-eval" || !strings.HasPrefix(spec.Pipeline, "name: flowers-eval\nlabel:") || spec.Epochs != 2 {
		t.Errorf("pipeline %q named %q, epochs %d: want the inline spec as a document, then the keys after it", spec.Pipeline, p.Name(), spec.Epochs)
	}

	// A problem inside it is reported at its line in the job file, with
	// the file's other problems.
	bad := strings.Replace(inlinePipelineJob, "size: 56", "size: 0", 1)
	bad = strings.Replace(bad, "epochs: 2", "epochs: -1", 1)
	_, err = Parse([]byte(bad))
	want := []string{
		"line 11: pipeline: ops[2] (center_crop): size 0: want 1..8192",
		"line 14: epochs: -1: want 1..10000",
	}
	if diff := cmp.Diff(want, problems(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}

	// In JSON (a flow mapping) and as a block string, too.
	spec, err = Parse([]byte(`{"id": "j", "dataset": "s3://b/p/", "batch_size": 1, "epochs": 1,
		"pipeline": {"ops": ["decode", {"op": "resize", "size": 32}, "to_uint8_hwc"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Lookup(spec.Pipeline, pipeline.Options{}); err != nil {
		t.Errorf("JSON inline pipeline %q: %v", spec.Pipeline, err)
	}
	_, err = Parse([]byte("id: j\ndataset: s3://b/p/\nbatch_size: 1\nepochs: 1\npipeline: |\n  ops:\n    - decode\n    - op: resize\n      size: 0\n    - to_uint8_hwc\n"))
	if diff := cmp.Diff([]string{"line 9: pipeline: ops[1] (resize): size 0: want 1..8192"}, problems(t, err)); diff != "" {
		t.Errorf("block string pipeline problems (-want +got):\n%s", diff)
	}
}

func TestParseSyntaxAndShape(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want string
	}{
		{"", "empty job spec"},
		{"id: [\n", "line 1: not valid YAML: did not find expected node content"},
		{"- id: j\n", "line 1: want a mapping of id, dataset, pipeline"},
		{"id: j\nreaders: trainer\n", `line 2: readers: "trainer": want a list of reader names`},
		{"id: j\nbatch_size: 1.5\n", "line 2: batch_size: 1.5: want an integer"},
		{"id: j\npipeline: [decode]\n", "line 2: pipeline: a list: want a built-in pipeline name or a pipeline spec (a mapping)"},
	} {
		_, err := Parse([]byte(c.doc))
		if got := strings.Join(problems(t, err), "\n"); !strings.Contains(got, c.want) {
			t.Errorf("%q: problems %q lack %q", c.doc, got, c.want)
		}
	}
	// A value that cannot be read has that one problem, not also the
	// zero value's.
	_, err := Parse([]byte("id: j\ndataset: s3://b/p/\npipeline: criteo\nbatch_size: many\nepochs: 1\n"))
	if diff := cmp.Diff([]string{`line 4: batch_size: "many": want an integer`}, problems(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestParseWithOverrides(t *testing.T) {
	doc := "dataset: s3://b/p/\npipeline: imagenet-eval\nbatch_size: 4\nepochs: 3\n"
	spec, err := ParseWith([]byte(doc), func(s *wire.JobSpec) { s.ID, s.Epochs = "from-flag", 5 })
	if err != nil {
		t.Fatal(err)
	}
	if spec.ID != "from-flag" || spec.Epochs != 5 || spec.BatchSize != 4 {
		t.Errorf("spec %+v: want the flags' id and epochs over the file's", spec)
	}
	// A bad value from a flag is not blamed on the file's line.
	_, err = ParseWith([]byte(doc), func(s *wire.JobSpec) { s.ID, s.Epochs = "j", 0 })
	if diff := cmp.Diff([]string{"epochs: 0: want 1..10000"}, problems(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestCheckWithoutFile(t *testing.T) {
	spec := wire.JobSpec{ID: "j", Dataset: "s3://data/ds/", Pipeline: "imagenet-train", BatchSize: 4, Epochs: 1, Seed: 11}.WithDefaults()
	if err := Check(spec); err != nil {
		t.Fatal(err)
	}
	spec.Pipeline = "ops:\n  - decode\n  - op: resize\n    size: 0\n  - to_uint8_hwc\n"
	spec.BatchSize = 0
	want := []string{"batch_size: 0: want 1..65536", "pipeline: line 4: ops[1] (resize): size 0: want 1..8192"}
	if diff := cmp.Diff(want, problems(t, Check(spec))); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestParseJSON(t *testing.T) {
	// Indented with tabs, which YAML does not read: JSON still does.
	spec, err := Parse([]byte("{\n\t\"id\": \"j\",\n\t\"dataset\": \"s3://b/p/\",\n\t\"pipeline\": \"criteo\",\n\t\"batch_size\": 2,\n\t\"epochs\": 1\n}\n"))
	if err != nil || spec.ID != "j" || spec.Pipeline != "criteo" {
		t.Errorf("tab-indented JSON: %+v, %v", spec, err)
	}
	_, err = Parse([]byte("\n{\n  \"id\": \"j\",\n  \"epochs\": 1,,\n}\n"))
	if diff := cmp.Diff([]string{"line 4: not valid JSON: invalid character ',' looking for beginning of object key string"}, problems(t, err)); diff != "" {
		t.Errorf("JSON syntax error (-want +got):\n%s", diff)
	}
}

func TestParseSources(t *testing.T) {
	doc := `id: mix
sources:
  - dataset: s3://data/web/
    weight: 3
  - dataset: s3://data/code/
    weight: 1
    pipeline: text-wordpiece
    repeat: 2
pipeline: imagenet-train
batch_size: 64
epochs: 1
`
	got, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.SourceSpec{{Dataset: "s3://data/web/", Weight: 3}, {Dataset: "s3://data/code/", Weight: 1, Pipeline: "text-wordpiece", Repeat: 2}}
	if diff := cmp.Diff(want, got.Sources); diff != "" || got.Dataset != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}

	// Each problem names its source's field, at its line.
	doc = `id: mix
dataset: s3://data/web/
sources:
  - dataset: s3://data/web/
    weight: 0
  - dataset: s3://data/code/
    weight: 1
    pipeline: nosuch
    repeat: 2
    choose: 3
pipeline: imagenet-train
batch_size: 64
epochs: 1
`
	_, err = Parse([]byte(doc))
	ps := strings.Join(problems(t, err), "\n")
	for _, w := range []string{
		`line 2: dataset: "s3://data/web/": give dataset or sources, not both`,
		`line 5: sources[0].weight: 0: want > 0`,
		`line 9: sources[1].repeat: 2: give repeat or choose, not both`,
		`line 8: sources[1].pipeline: unknown pipeline "nosuch"`,
	} {
		if !strings.Contains(ps, w) {
			t.Errorf("problems:\n%s\nwant one starting %q", ps, w)
		}
	}
	for _, tc := range []struct{ doc, want string }{
		{"id: m\nsources: s3://x/\npipeline: p\nbatch_size: 1\nepochs: 1\n", "want a list of sources"},
		{"id: m\nsources: [{dataset: s3://x/, weight: 1, wieght: 2}]\npipeline: p\nbatch_size: 1\nepochs: 1\n", `unknown key "wieght"`},
		{"id: m\nsources: []\npipeline: imagenet-train\nbatch_size: 1\nepochs: 1\n", "dataset: not set"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestParseSweepSources(t *testing.T) {
	s, err := ParseSweep([]byte(`id: sw
sources:
  - {dataset: s3://d/a/, weight: 3}
  - {dataset: s3://d/b/, weight: 1, pipeline: imagenet-eval}
pipeline: imagenet-train
batch_size: 8
epochs: 1
count: 2
`))
	if err != nil {
		t.Fatal(err)
	}
	jobs := s.Jobs()
	want := []wire.SourceSpec{{Dataset: "s3://d/a/", Weight: 3}, {Dataset: "s3://d/b/", Weight: 1, Pipeline: "imagenet-eval"}}
	if len(jobs) != 1 || !cmp.Equal(jobs[0].Sources, want) || len(jobs[0].Readers) != 2 {
		t.Errorf("jobs %+v: want one job of the mixture, read by both trials", jobs)
	}
}

// The job file docs/mixing.md shows is a valid spec.
func TestMixingDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/mixing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/mixing.md has no yaml block")
	}
	spec, err := Parse([]byte(block))
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(spec.WithDefaults()); err != nil || len(spec.Sources) != 2 {
		t.Errorf("docs/mixing.md's spec: %d sources, %v", len(spec.Sources), err)
	}
}
