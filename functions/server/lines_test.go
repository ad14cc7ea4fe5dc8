package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/functions/tabular"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

func putObject(t *testing.T, e *env, key string, data []byte) {
	t.Helper()
	if _, err := e.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: ptr(bucket), Key: &key, Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
}

// A .tsv shard goes through the lines reader and the criteo pipeline: one
// row per line, keyed by shard and line number, and a bad line fails alone.
func TestTSVShard(t *testing.T) {
	e := setup(t, Config{})
	shards, err := synth.Tabular(synth.TabularOptions{Samples: 50, Shards: 1, Seed: 4, MissingRate: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	// Line 50 is empty (skipped), 51 is broken, 52 is a good one again.
	lines := strings.Split(strings.TrimSuffix(string(shards[0].Data), "\n"), "\n")
	data := string(shards[0].Data) + "\nnot\ta\tcriteo\tline\n" + lines[0] + "\r\n"
	lines = append(lines, "", "not\ta\tcriteo\tline", lines[0])
	putObject(t, e, "tab/part-07.tsv", []byte(data))

	tk := task(0)
	tk.Key, tk.Pipeline = "tab/part-07.tsv", "criteo"
	out := complete(t, post(t, e.url, taskEvent(t, tk)))
	res := out.end
	wantFailed := []wire.FailedSample{{Key: "part-07/00000051"}}
	if diff := cmp.Diff(wantFailed, res.Failed, cmp.Comparer(func(a, b wire.FailedSample) bool { return a.Key == b.Key })); diff != "" {
		t.Errorf("failed samples (-want +got):\n%s", diff)
	}
	if len(res.Failed) == 1 && !strings.Contains(res.Failed[0].Reason, "4 tab-separated columns, want 40") {
		t.Errorf("failed sample reason %q does not say what is wrong", res.Failed[0].Reason)
	}
	if res.Samples != 51 || res.Chunks != 1 {
		t.Errorf("result %+v: want 51 samples in 1 chunk", res)
	}

	f, keys := chunkKeys(t, out.chunks[0])
	label, dense, sparse := f.Tensors["label"], f.Tensors["dense"], f.Tensors["sparse"]
	n := len(keys)
	if label.DType != safetensors.I64 || !slices.Equal(label.Shape, []int{n}) ||
		dense.DType != safetensors.F32 || !slices.Equal(dense.Shape, []int{n, 13}) ||
		sparse.DType != safetensors.I64 || !slices.Equal(sparse.Shape, []int{n, 26}) {
		t.Fatalf("tensors label %s%v dense %s%v sparse %s%v for %d rows", label.DType, label.Shape, dense.DType, dense.Shape, sparse.DType, sparse.Shape, n)
	}
	o := tabular.DefaultCriteoOptions()
	for row, key := range keys {
		var lineNo int
		if _, err := fmt.Sscanf(key, "part-07/%08d", &lineNo); err != nil || lineNo >= len(lines) {
			t.Fatalf("row %d: key %q: want part-07/<line number>", row, key)
		}
		l, d, s, err := tabular.ParseCriteo([]byte(lines[lineNo]), o)
		if err != nil {
			t.Fatalf("row %d (%s): %v", row, key, err)
		}
		if got := int64(binary.LittleEndian.Uint64(label.Data[8*row:])); got != l {
			t.Errorf("row %d (%s): label %d, want %d", row, key, got, l)
		}
		for i := range d {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(dense.Data[4*(13*row+i):])); got != d[i] {
				t.Errorf("row %d (%s): I%d = %v, want %v", row, key, i+1, got, d[i])
			}
		}
		for i := range s {
			if got := int64(binary.LittleEndian.Uint64(sparse.Data[8*(26*row+i):])); got != s[i] {
				t.Errorf("row %d (%s): C%d = %d, want %d", row, key, i+1, got, s[i])
			}
		}
	}
	if keys[0] != "part-07/00000000" || keys[n-1] != "part-07/00000052" {
		t.Errorf("keys %s..%s, want part-07/00000000..part-07/00000052", keys[0], keys[n-1])
	}
}

// A .jsonl shard is read line by line whatever the pipeline: an image
// pipeline fails every line for want of an image member.
func TestJSONLShardWithImagePipeline(t *testing.T) {
	e := setup(t, Config{})
	putObject(t, e, "text/s.jsonl", []byte("{\"text\":\"a\"}\n{\"text\":\"b\"}\n"))
	tk := task(0)
	tk.Key = "text/s.jsonl"
	res := complete(t, post(t, e.url, taskEvent(t, tk))).end
	if res.Samples != 0 || len(res.Failed) != 2 || res.Failed[0].Key != "s/00000000" || res.Failed[1].Key != "s/00000001" {
		t.Fatalf("result %+v: want both lines failed", res)
	}
	for _, f := range res.Failed {
		if !strings.Contains(f.Reason, "image") || !strings.Contains(f.Reason, "jsonl") {
			t.Errorf("%s: reason %q, want one naming the missing image and the jsonl member", f.Key, f.Reason)
		}
	}
}

// The reader is chosen by the key's suffix; an unknown one is refused
// before the shard is fetched (400 even though the object does not exist).
func TestUnsupportedShardSuffix(t *testing.T) {
	e := setup(t, Config{})
	for key, want := range map[string]string{
		"train/x.csv":    `unsupported suffix ".csv": want one of .tar, .jsonl, .tsv, .parquet`,
		"train/x.tar.gz": `unsupported suffix ".gz"`,
		"train/x":        `shard key "train/x" has no suffix`,
	} {
		tk := task(0)
		tk.Key = key
		expectStatus(t, post(t, e.url, taskEvent(t, tk)), 400, want)
	}
	if got := metricValue(t, e.reg, "sluice_function_shards_total", "outcome", "invalid"); got != 3 {
		t.Errorf("shards_total{invalid} = %v, want 3", got)
	}
}
