package synth

import (
	"bytes"
	"fmt"
	"testing"

	pq "github.com/parquet-go/parquet-go"
)

func TestAsParquet(t *testing.T) {
	imgs, err := Images(ImageOptions{Samples: 12, Shards: 2, Seed: 1, MinSide: 16, MaxSide: 32, Quality: 80, Classes: 3, Corrupt: 2})
	if err != nil {
		t.Fatal(err)
	}
	out, err := AsParquet(imgs, ParquetOptions{RowsPerGroup: 4, ExtraBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	corrupt := 0
	for i, s := range out {
		if s.Name != fmt.Sprintf("shard-%06d.parquet", i) || s.Samples != 6 {
			t.Fatalf("shard %d: %s, %d samples", i, s.Name, s.Samples)
		}
		corrupt += len(s.Corrupt)
		f, err := pq.OpenFile(bytes.NewReader(s.Data), int64(len(s.Data)))
		if err != nil {
			t.Fatal(err)
		}
		if f.NumRows() != 6 || len(f.RowGroups()) != 2 {
			t.Fatalf("shard %d: %d rows in %d groups", i, f.NumRows(), len(f.RowGroups()))
		}
		var names []string
		for _, c := range f.Root().Columns() {
			names = append(names, c.Name())
		}
		if fmt.Sprint(names) != "[image label extra]" {
			t.Fatalf("columns %v", names)
		}
	}
	if corrupt != 2 {
		t.Fatalf("%d corrupt rows, want 2", corrupt)
	}
	txt, err := Text(TextOptions{Samples: 5, Shards: 1, Seed: 1, Format: "tar"})
	if err != nil {
		t.Fatal(err)
	}
	out, err = AsParquet(txt, ParquetOptions{TextColumn: "content", Compression: "zstd"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := pq.OpenFile(bytes.NewReader(out[0].Data), int64(len(out[0].Data)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Root().Column("content") == nil || f.Root().Column("label") == nil || f.NumRows() != 5 {
		t.Fatalf("text file: %v", f.Schema())
	}
}
