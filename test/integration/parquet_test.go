package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"

	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// parquetDataset uploads shards (Parquet files) and returns the dataset
// with the keys a job over it delivers: "<file base>/<row>".
func (c *Cluster) parquetDataset(bucket, prefix string, shards []synth.Shard) Dataset {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := synth.Upload(ctx, c.S3.Client(c.T), bucket, prefix, shards); err != nil {
		c.T.Fatalf("%v\n%s", err, c.S3.Tail(20))
	}
	d := Dataset{Bucket: bucket, Prefix: prefix, Shards: len(shards)}
	for _, s := range shards {
		base := strings.TrimSuffix(s.Name, ".parquet")
		for row := range s.Samples {
			d.Keys = append(d.Keys, fmt.Sprintf("%s/%08d", base, row))
		}
		d.Corrupt = append(d.Corrupt, s.Corrupt...)
	}
	slices.Sort(d.Keys)
	slices.Sort(d.Corrupt)
	return d
}

// chunkBytesOf is what the column chunks of cols take in the files.
func chunkBytesOf(t *testing.T, shards []synth.Shard, cols ...string) (chunks, files int64) {
	t.Helper()
	for _, s := range shards {
		f, err := pq.OpenFile(bytes.NewReader(s.Data), int64(len(s.Data)))
		if err != nil {
			t.Fatal(err)
		}
		files += int64(len(s.Data))
		for _, g := range f.Metadata().RowGroups {
			for _, c := range g.Columns {
				if slices.Contains(cols, strings.Join(c.MetaData.PathInSchema, ".")) {
					chunks += c.MetaData.TotalCompressedSize
				}
			}
		}
	}
	return chunks, files
}

// TestIntegrationParquet: jobs over Parquet datasets, through the real
// binaries with versitygw serving the files. An image job (Hugging
// Face's image struct and label, beside a large column no pipeline reads)
// and a text job whose text is in a column the job names (columns: {txt:
// content}) each deliver every row of every epoch exactly once, the
// corrupt images as failed samples; the image job's status says it read
// from S3 the image and label chunks' bytes and the footers, not the
// other column's.
func TestIntegrationParquet(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	opts := SmallImages(120, 4, 23)
	opts.Corrupt = 3
	imgs, err := synth.Images(opts)
	if err != nil {
		t.Fatal(err)
	}
	pqImgs, err := synth.AsParquet(imgs, synth.ParquetOptions{RowsPerGroup: 8, ExtraBytes: 40 << 10})
	if err != nil {
		t.Fatal(err)
	}
	images := c.parquetDataset("pqimages", "hf/train/", pqImgs)
	texts, err := synth.Text(synth.TextOptions{Samples: 300, Shards: 3, Seed: 5, Format: "tar"})
	if err != nil {
		t.Fatal(err)
	}
	pqTexts, err := synth.AsParquet(texts, synth.ParquetOptions{RowsPerGroup: 50, TextColumn: "content", Compression: "zstd"})
	if err != nil {
		t.Fatal(err)
	}
	text := c.parquetDataset("pqtext", "news/", pqTexts)

	jobs := []struct {
		id   string
		d    Dataset
		spec Spec
	}{
		{"pq-images", images, imageJob("pq-images", images, "imagenet-eval")},
		{"pq-text", text, Spec{"id": "pq-text", "dataset": text.URL(), "pipeline": "text-wordpiece",
			"batch_size": scenarioBatch, "epochs": scenarioEpochs, "seed": 7, "max_replicas": 2,
			"columns": map[string]string{"txt": "content"}}},
	}
	start := time.Now()
	for _, j := range jobs {
		c.Submit(j.spec)
		agent := c.StartAgent("agent-"+j.id, j.id)
		tr := NewTrainer()
		trained := runTrainer(ctx, tr, agent)
		waitTrained(t, trained)
		logReport(t, tr.Check(j.id, j.d.Keys, scenarioEpochs, j.d.Corrupt, time.Since(start)))
		waitReleased(t, c, js, j.id, wire.JobSucceeded, ctrl)
	}

	chunks, files := chunkBytesOf(t, pqImgs, "image.bytes", "label")
	// The paths' chunk lies between the images' and the labels', and is
	// read with them (one request a row group).
	between, _ := chunkBytesOf(t, pqImgs, "image.path")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	st, err := JobStatus(sctx, js, "pq-images")
	if err != nil {
		t.Fatal(err)
	}
	footers := int64(len(pqImgs)) * 16 << 10
	for e, n := range st.S3BytesPerEpoch {
		t.Logf("epoch %d: read %d bytes from S3: image and label chunks %d, paths between them %d, files %d", e, n, chunks, between, files)
		if n != chunks+between+footers {
			t.Errorf("epoch %d: read %d bytes from S3, want the image and label chunks' %d, the paths' %d and the files' last 16 KiB, %d (the files have %d)",
				e, n, chunks, between, footers, files)
		}
	}
	if len(st.S3BytesPerEpoch) != scenarioEpochs {
		t.Errorf("status has S3 bytes for %d epochs, want %d", len(st.S3BytesPerEpoch), scenarioEpochs)
	}
}
