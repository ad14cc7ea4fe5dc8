package integration

import (
	"bytes"
	"context"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/synth"
)

// Dataset is a synthetic dataset uploaded to the cluster's S3 server, with
// the keys a job over it must deliver.
type Dataset struct {
	Bucket, Prefix string
	Shards         int
	Keys           []string // every sample's key, sorted
	Corrupt        []string // keys of samples that must fail, sorted
}

// URL is the dataset's s3://bucket/prefix/.
func (d Dataset) URL() string { return "s3://" + d.Bucket + "/" + d.Prefix }

// SmallImages are JPEG WebDataset shards small enough that a scenario of
// two epochs takes seconds on two cores.
func SmallImages(samples, shards int, seed uint64) synth.ImageOptions {
	o := synth.DefaultImageOptions()
	o.Samples, o.Shards, o.Seed = samples, shards, seed
	o.MinSide, o.MaxSide = 64, 128
	return o
}

// UploadImages generates the images and uploads them straight to versitygw.
func (c *Cluster) UploadImages(bucket, prefix string, o synth.ImageOptions) Dataset {
	c.T.Helper()
	shards, err := synth.Images(o)
	if err != nil {
		c.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := synth.Upload(ctx, c.S3.Client(c.T), bucket, prefix, shards); err != nil {
		c.T.Fatalf("%v\n%s", err, c.S3.Tail(20))
	}
	return DatasetOf(c.T, bucket, prefix, shards)
}

// DatasetOf is the dataset of shards uploaded to bucket/prefix.
func DatasetOf(t testing.TB, bucket, prefix string, shards []synth.Shard) Dataset {
	d := Dataset{Bucket: bucket, Prefix: prefix, Shards: len(shards)}
	for _, s := range shards {
		d.Corrupt = append(d.Corrupt, s.Corrupt...)
	}
	// The keys as a reader of the uploaded bytes sees them.
	for _, s := range shards {
		r := wds.NewReader(bytes.NewReader(s.Data), 64<<20)
		for {
			smp, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("reading back %s: %v", s.Name, err)
			}
			d.Keys = append(d.Keys, smp.Key)
		}
	}
	sort.Strings(d.Keys)
	if !strings.HasSuffix(prefix, "/") {
		t.Fatalf("dataset prefix %q: want a trailing slash", prefix)
	}
	sort.Strings(d.Corrupt)
	return d
}
