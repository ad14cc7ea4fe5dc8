package server

import (
	"bytes"
	"strings"
	"testing"

	pq "github.com/parquet-go/parquet-go"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// tarAsParquet writes a tar shard's samples as a Parquet file, in order,
// rowsPerGroup to a row group, each row with extraBytes in a column
// ("extra") that no pipeline reads.
func tarAsParquet(t testing.TB, s synth.Shard, rowsPerGroup int64, extraBytes int) []byte {
	t.Helper()
	out, err := synth.AsParquet([]synth.Shard{s}, synth.ParquetOptions{RowsPerGroup: rowsPerGroup, ExtraBytes: extraBytes})
	if err != nil {
		t.Fatal(err)
	}
	return out[0].Data
}

// projectedBytes is what the column chunks of cols take in a file, and its
// footer with the 8 bytes after it.
func projectedBytes(t testing.TB, data []byte, cols ...string) (chunks, footer int64) {
	t.Helper()
	f, err := pq.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Metadata().RowGroups {
		for _, c := range g.Columns {
			for _, want := range cols {
				if strings.Join(c.MetaData.PathInSchema, ".") == want {
					chunks += c.MetaData.TotalCompressedSize
				}
			}
		}
	}
	footer = int64(data[len(data)-8]) | int64(data[len(data)-7])<<8 | int64(data[len(data)-6])<<16 | int64(data[len(data)-5])<<24
	return chunks, footer + 8
}

// tensorsOf decodes a shard's chunks into its tensors' bytes in order.
func tensorsOf(t *testing.T, out output) map[string][]byte {
	t.Helper()
	all := map[string][]byte{}
	for _, c := range out.chunks {
		f, err := safetensors.Decode(c)
		if err != nil {
			t.Fatal(err)
		}
		for name, tn := range f.Tensors {
			all[name] = append(all[name], tn.Data...)
		}
	}
	return all
}

// TestParquetImageShardMatchesItsTar: the same images in a Parquet file
// (Hugging Face's image struct, an int label) give the image pipeline's
// output the tar gives, sample for sample, corrupt images failing alike;
// only the image and label columns are read, not the large extra column.
func TestParquetImageShardMatchesItsTar(t *testing.T) {
	e := setup(t, Config{})
	shard := e.shards[1]
	data := tarAsParquet(t, shard, 7, 20000)
	putObject(t, e, "pq/train-00001.parquet", data)

	tarTask := task(1)
	tarTask.Pipeline = "imagenet-eval"
	pqTask := tarTask
	pqTask.Key = "pq/train-00001.parquet"
	fromTar := complete(t, post(t, e.url, taskEvent(t, tarTask)))
	fromPq := complete(t, post(t, e.url, taskEvent(t, pqTask)))

	if fromPq.end.Samples != fromTar.end.Samples || fromPq.end.FailedCount() != len(shard.Corrupt) || fromPq.end.Samples == 0 {
		t.Fatalf("parquet: %d samples, %d failed; tar: %d samples, %d failed (%d corrupt)",
			fromPq.end.Samples, fromPq.end.FailedCount(), fromTar.end.Samples, fromTar.end.FailedCount(), len(shard.Corrupt))
	}
	for _, f := range fromPq.end.Failed {
		if !strings.HasPrefix(f.Key, "train-00001/") || !strings.Contains(f.Reason, "member jpg") {
			t.Errorf("failed sample %s: %q", f.Key, f.Reason)
		}
	}
	want, got := tensorsOf(t, fromTar), tensorsOf(t, fromPq)
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Errorf("tensor %s differs from the tar's (%d bytes, want %d)", name, len(got[name]), len(w))
		}
	}
	if len(got) != len(want) {
		t.Errorf("tensors %d, want %d", len(got), len(want))
	}
	_, keys := chunkKeys(t, fromPq.chunks[0])
	if keys[0] != "train-00001/00000000" && keys[0] != "train-00001/00000001" {
		t.Errorf("first key %q, want train-00001/<row>", keys[0])
	}

	// The image paths' chunk lies between the images' and the labels':
	// it is read with them, one request a row group.
	chunks, footer := projectedBytes(t, data, "image.bytes", "label")
	between, _ := projectedBytes(t, data, "image.path")
	read := fromPq.end.S3Bytes
	probe := min(int64(len(data)), 16<<10)
	if footer > probe {
		probe += footer
	}
	if fromPq.end.Cache != "bypass" || read != chunks+between+probe {
		t.Errorf("read %d bytes (cache %q), want the image and label chunks' %d, the paths' between them %d and the footer's %d, of the file's %d",
			read, fromPq.end.Cache, chunks, between, probe, len(data))
	}
	t.Logf("read %d bytes of %d: chunks %d, footer %d", read, len(data), chunks, footer)
	if read*2 > int64(len(data)) {
		t.Errorf("read %d of the file's %d bytes: the extra column was read", read, len(data))
	}
}

// TestParquetTextShard: a text column through the WordPiece pipeline.
func TestParquetTextShard(t *testing.T) {
	e := setup(t, Config{})
	shards, err := synth.Text(synth.TextOptions{Samples: 40, Shards: 1, Seed: 2, Format: "tar"})
	if err != nil {
		t.Fatal(err)
	}
	pqs, err := synth.AsParquet(shards, synth.ParquetOptions{RowsPerGroup: 16, Compression: "zstd"})
	if err != nil {
		t.Fatal(err)
	}
	putObject(t, e, "text/part-0.parquet", pqs[0].Data)
	tk := task(0)
	tk.Key, tk.Pipeline = "text/part-0.parquet", "text-wordpiece"
	out := complete(t, post(t, e.url, taskEvent(t, tk)))
	if out.end.Samples != 40 || out.end.FailedCount() != 0 {
		t.Fatalf("end %+v: want 40 samples", out.end)
	}
	f, keys := chunkKeys(t, out.chunks[0])
	if keys[0] != "part-0/00000000" || len(f.Tensors) == 0 {
		t.Fatalf("keys %v tensors %v", keys[:1], len(f.Tensors))
	}
}

// TestParquetMissingColumnAndCorruptFile: a column the task names that the
// file lacks, and a file that is not Parquet, each fail the shard's one
// sample named after the file, with the reason; nothing is retried.
func TestParquetMissingColumnAndCorruptFile(t *testing.T) {
	e := setup(t, Config{})
	putObject(t, e, "pq/a.parquet", tarAsParquet(t, e.shards[0], 10, 10))
	putObject(t, e, "pq/b.parquet", []byte("PAR1 this is not a parquet file at all"))
	cases := []struct {
		key  string
		cols map[string]string
		want string
	}{
		{"pq/a.parquet", map[string]string{"jpg": "img", "cls": "label"}, `no column "img" (for member jpg): the file has "image", "label", "extra"`},
		{"pq/b.parquet", nil, "does not end in PAR1"},
	}
	for _, c := range cases {
		tk := task(0)
		tk.Key, tk.Columns = c.key, wire.ColumnsOf(c.cols)
		end := complete(t, post(t, e.url, taskEvent(t, tk))).end
		base := strings.TrimSuffix(strings.TrimPrefix(c.key, "pq/"), ".parquet")
		if end.Samples != 0 || len(end.Failed) != 1 || end.Failed[0].Key != base ||
			!strings.Contains(end.Failed[0].Reason, c.want) || !strings.Contains(end.Failed[0].Reason, c.key) {
			t.Errorf("%s: end %+v, want one failure keyed %s saying %q", c.key, end, base, c.want)
		}
	}
	missing := task(0)
	missing.Key = "pq/none.parquet"
	expectStatus(t, post(t, e.url, taskEvent(t, missing)), 404, "none.parquet")
}

// TestParquetBadColumnsRefused: a task's column mapping is checked.
func TestParquetBadColumnsRefused(t *testing.T) {
	e := setup(t, Config{})
	tk := task(0)
	tk.Key, tk.Columns = "pq/a.parquet", wire.ColumnsOf(map[string]string{"jpg": "image..bytes"})
	expectStatus(t, post(t, e.url, taskEvent(t, tk)), 400, "empty part")
}
