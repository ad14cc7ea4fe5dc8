package synth

import (
	"bytes"
	"context"
	"image/jpeg"
	"io"
	"testing"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/testenv"
)

func TestImagesAreSeededDecodableAndUploaded(t *testing.T) {
	o := DefaultImageOptions()
	o.Samples, o.Shards, o.Corrupt = 40, 4, 3
	a, err := Images(o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Images(o)
	total, bad := 0, 0
	for i := range a {
		if !bytes.Equal(a[i].Data, b[i].Data) {
			t.Fatalf("shard %d differs between runs with one seed", i)
		}
		r := wds.NewReader(bytes.NewReader(a[i].Data), 0)
		for {
			s, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			total++
			if _, err := jpeg.Decode(bytes.NewReader(s.Files["jpg"])); err != nil {
				bad++
			}
		}
	}
	if total != 40 || bad != 3 {
		t.Fatalf("samples %d (want 40), undecodable %d (want 3)", total, bad)
	}

	c, _ := testenv.S3(t, "")
	ctx := context.Background()
	if err := Upload(ctx, c, "data", "imgs/", a); err != nil {
		t.Fatal(err)
	}
	keys, err := objstore.ListShards(ctx, c, "data", "imgs/")
	if err != nil || len(keys) != 4 || keys[0] != "imgs/shard-000000.tar" {
		t.Fatalf("ListShards = %v, %v", keys, err)
	}
	if _, err := objstore.ListShards(ctx, c, "data", "nothing/"); err == nil {
		t.Fatal("want error for empty prefix")
	}
	if _, err := objstore.ListShards(ctx, c, "missing", ""); err == nil {
		t.Fatal("want error for missing bucket")
	}
}
