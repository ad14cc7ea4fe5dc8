package synth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"reflect"
	"strconv"
	"strings"

	pq "github.com/parquet-go/parquet-go"

	"github.com/sluice-project/sluice/format/wds"
)

// ParquetOptions shape the Parquet files AsParquet writes.
type ParquetOptions struct {
	// RowsPerGroup is the rows of one row group (default 1000).
	RowsPerGroup int64
	// TextColumn is the column txt members go to (default "text").
	TextColumn string
	// ExtraBytes adds a column "extra" of that many incompressible bytes
	// to every row, which no pipeline reads: what the other columns of a
	// wide table cost, and what reading by column saves (0: none).
	ExtraBytes int
	// Compression is "snappy" (the default, as pyarrow's), "zstd" or "none".
	Compression string
	Seed        uint64
}

// parquetImage is Hugging Face's image struct.
type parquetImage struct {
	Bytes []byte `parquet:"bytes"`
	Path  string `parquet:"path"`
}

// AsParquet rewrites WebDataset tar shards (Images', Text's in tar) as
// Parquet files laid out as Hugging Face datasets are: a jpg member
// becomes an "image" struct of {bytes, path}, a cls member an int64
// "label", a txt member a string column (TextColumn); the rows in the
// tar's order. Each shard keeps its name with .parquet for .tar, and its
// corrupt samples' keys become the rows' ("<name>/<row>").
func AsParquet(shards []Shard, o ParquetOptions) ([]Shard, error) {
	if o.RowsPerGroup <= 0 {
		o.RowsPerGroup = 1000
	}
	if o.TextColumn == "" {
		o.TextColumn = "text"
	}
	var codec pq.WriterOption
	switch o.Compression {
	case "", "snappy":
		codec = pq.Compression(&pq.Snappy)
	case "zstd":
		codec = pq.Compression(&pq.Zstd)
	case "none":
		codec = pq.Compression(&pq.Uncompressed)
	default:
		return nil, fmt.Errorf("parquet compression %q: want snappy, zstd or none", o.Compression)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x9a7e))
	out := make([]Shard, len(shards))
	for i, s := range shards {
		samples, err := readSamples(s)
		if err != nil {
			return nil, err
		}
		base := strings.TrimSuffix(s.Name, path.Ext(s.Name))
		out[i] = Shard{Name: base + ".parquet", Samples: len(samples)}
		corrupt := map[string]bool{}
		for _, k := range s.Corrupt {
			corrupt[k] = true
		}
		for row, smp := range samples {
			if corrupt[smp.Key] {
				out[i].Corrupt = append(out[i].Corrupt, fmt.Sprintf("%s/%08d", base, row))
			}
		}
		if out[i].Data, err = writeParquet(samples, o, codec, rng); err != nil {
			return nil, fmt.Errorf("writing %s as parquet: %w", s.Name, err)
		}
	}
	return out, nil
}

func readSamples(s Shard) ([]wds.Sample, error) {
	var out []wds.Sample
	r := wds.NewReader(bytes.NewReader(s.Data), 0)
	for {
		smp, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", s.Name, err)
		}
		out = append(out, smp)
	}
}

// writeParquet writes samples as rows of a struct made for the members
// they have.
func writeParquet(samples []wds.Sample, o ParquetOptions, codec pq.WriterOption, rng *rand.Rand) ([]byte, error) {
	has := map[string]bool{}
	for _, s := range samples {
		for m := range s.Files {
			has[m] = true
		}
	}
	var fields []reflect.StructField
	add := func(name string, t reflect.Type, tag string) {
		fields = append(fields, reflect.StructField{Name: name, Type: t, Tag: reflect.StructTag(`parquet:"` + tag + `"`)})
	}
	if has["jpg"] {
		add("Image", reflect.TypeFor[parquetImage](), "image")
	}
	if has["cls"] {
		add("Label", reflect.TypeFor[int64](), "label")
	}
	if has["txt"] {
		add("Text", reflect.TypeFor[string](), o.TextColumn)
	}
	if o.ExtraBytes > 0 {
		add("Extra", reflect.TypeFor[[]byte](), "extra")
	}
	if len(fields) == 0 {
		return nil, errors.New("no jpg, cls or txt members")
	}
	t := reflect.StructOf(fields)
	var buf bytes.Buffer
	// No min and max of the binary columns, in the footer or in the
	// page headers (where parquet-go puts two whole images by default):
	// pyarrow by default leaves large statistics out.
	opts := []pq.WriterOption{pq.SchemaOf(reflect.New(t).Interface()), codec, pq.MaxRowsPerRowGroup(o.RowsPerGroup)}
	for _, col := range [][]string{{"image", "bytes"}, {"extra"}, {o.TextColumn}} {
		opts = append(opts, pq.SkipPageBounds(col...), pq.SkipPageStatistics(col...))
	}
	w := pq.NewWriter(&buf, opts...)
	for _, s := range samples {
		row := reflect.New(t).Elem()
		if f := row.FieldByName("Image"); f.IsValid() {
			f.Set(reflect.ValueOf(parquetImage{Bytes: s.Files["jpg"], Path: s.Key + ".jpg"}))
		}
		if f := row.FieldByName("Label"); f.IsValid() {
			v, err := strconv.ParseInt(strings.TrimSpace(string(s.Files["cls"])), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("sample %s: cls %q", s.Key, s.Files["cls"])
			}
			f.SetInt(v)
		}
		if f := row.FieldByName("Text"); f.IsValid() {
			f.SetString(string(s.Files["txt"]))
		}
		if f := row.FieldByName("Extra"); f.IsValid() {
			extra := make([]byte, o.ExtraBytes)
			for i := range extra {
				extra[i] = byte(rng.Uint32())
			}
			f.SetBytes(extra)
		}
		if err := w.Write(row.Addr().Interface()); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
