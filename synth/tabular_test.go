package synth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/lines"
	"github.com/sluice-project/sluice/functions/tabular"
	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/testenv"
)

func TestTabular(t *testing.T) {
	o := TabularOptions{Samples: 4000, Shards: 4, Seed: 3, MissingRate: 0.1}
	a, err := Tabular(o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Tabular(o)
	opts := tabular.DefaultCriteoOptions()
	opts.DenseFill = -100 // marks missing values
	total, clicks, negative := 0, 0, 0
	var values, missing int
	for i, s := range a {
		if !bytes.Equal(s.Data, b[i].Data) {
			t.Fatalf("shard %d differs between runs with one seed", i)
		}
		if !strings.HasSuffix(s.Name, ".tsv") {
			t.Errorf("shard name %q", s.Name)
		}
		r := lines.NewReader(bytes.NewReader(s.Data), s.Name, "tsv", 0)
		n := 0
		for {
			smp, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			line := smp.Files["tsv"]
			label, dense, _, err := tabular.ParseCriteo(line, opts)
			if err != nil {
				t.Fatalf("%s: %v", smp.Key, err)
			}
			n++
			clicks += int(label)
			for _, col := range bytes.Split(line, []byte{'\t'})[1:] {
				values++
				if len(col) == 0 {
					missing++
				} else if col[0] == '-' {
					negative++
				}
			}
			for _, d := range dense {
				if d != -100 && d < 0 {
					t.Fatalf("%s: log1p'd dense value %v < 0", smp.Key, d)
				}
			}
		}
		if n != s.Samples || n != 1000 {
			t.Errorf("shard %d: %d lines, says %d, want 1000", i, n, s.Samples)
		}
		total += n
	}
	if rate := float64(missing) / float64(values); rate < 0.08 || rate > 0.12 {
		t.Errorf("missing rate %.3f, want about 0.1", rate)
	}
	if rate := float64(clicks) / float64(total); rate < 0.1 || rate > 0.5 {
		t.Errorf("click rate %.3f, want a minority of clicks", rate)
	}
	if negative == 0 {
		t.Error("no negative integer features (Criteo's I2 has some)")
	}

	// No missing values at rate 0.
	full, err := Tabular(TabularOptions{Samples: 50, Shards: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(full[0].Data, []byte("\t\t")) || bytes.Contains(full[0].Data, []byte("\t\n")) {
		t.Error("missing values with MissingRate 0")
	}
	for _, bad := range []TabularOptions{{Samples: 10, Shards: 1, MissingRate: 1}, {Samples: 10, Shards: 1, MissingRate: -0.1}, {Samples: 1, Shards: 2}} {
		if _, err := Tabular(bad); err == nil {
			t.Errorf("Tabular(%+v): no error", bad)
		}
	}
	if err := DefaultTabularOptions().Validate(); err != nil {
		t.Error(err)
	}
}

// Line shards are listed as shards like tar ones.
func TestUploadLineShards(t *testing.T) {
	tab, err := Tabular(TabularOptions{Samples: 20, Shards: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	txt, err := Text(TextOptions{Samples: 20, Shards: 3, Seed: 1, Format: "jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := testenv.S3(t, "")
	ctx := context.Background()
	if err := Upload(ctx, c, "data", "mixed/", append(tab, txt...)); err != nil {
		t.Fatal(err)
	}
	keys, err := objstore.ListShards(ctx, c, "data", "mixed/")
	want := []string{"mixed/shard-000000.jsonl", "mixed/shard-000000.tsv", "mixed/shard-000001.jsonl", "mixed/shard-000001.tsv", "mixed/shard-000002.jsonl"}
	if err != nil || strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("ListShards = %v, %v; want %v", keys, err, want)
	}
}
