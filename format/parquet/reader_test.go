package parquet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	pq "github.com/parquet-go/parquet-go"

	"github.com/sluice-project/sluice/format/wds"
)

// hfImage is Hugging Face's image struct.
type hfImage struct {
	Bytes []byte `parquet:"bytes"`
	Path  string `parquet:"path"`
}

type imageRow struct {
	Image hfImage `parquet:"image"`
	Label int64   `parquet:"label"`
	Notes string  `parquet:"notes"` // a large column no pipeline reads
}

type textRow struct {
	Text  string `parquet:"text"`
	Label *int32 `parquet:"label,optional"`
}

// write encodes rows as a Parquet file, rowsPerGroup rows per row group.
func write[T any](t testing.TB, rows []T, rowsPerGroup int64, opts ...pq.WriterOption) []byte {
	t.Helper()
	var buf bytes.Buffer
	opts = append(opts, pq.MaxRowsPerRowGroup(rowsPerGroup))
	w := pq.NewGenericWriter[T](&buf, opts...)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// countingReader is a file in memory that counts the bytes asked of it.
type countingReader struct {
	r     *bytes.Reader
	bytes atomic.Int64
	reads atomic.Int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.bytes.Add(int64(len(p)))
	c.reads.Add(1)
	return c.r.ReadAt(p, off)
}

// readAll reads every sample, and the sample errors apart.
func readAll(t testing.TB, data []byte, name string, cols map[string]string, l Limits) ([]wds.Sample, []*wds.SampleError) {
	t.Helper()
	rd, err := Open(bytes.NewReader(data), int64(len(data)), name, cols, l)
	var se *wds.SampleError
	if errors.As(err, &se) {
		return nil, []*wds.SampleError{se}
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer rd.Close()
	var out []wds.Sample
	var fails []*wds.SampleError
	for {
		s, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, fails
		}
		if errors.As(err, &se) {
			fails = append(fails, se)
			continue
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, s)
	}
}

func imageRows(n int) []imageRow {
	rows := make([]imageRow, n)
	for i := range rows {
		rows[i] = imageRow{Image: hfImage{Bytes: []byte(fmt.Sprintf("\xff\xd8jpeg-%d", i)), Path: fmt.Sprintf("%d.jpg", i)},
			Label: int64(i % 7), Notes: strings.Repeat("n", 1000)}
	}
	return rows
}

func TestImagesAndLabelsByDefaultColumns(t *testing.T) {
	data := write(t, imageRows(25), 10)
	got, fails := readAll(t, data, "ds/train-00003.parquet", nil, Limits{})
	if len(fails) > 0 {
		t.Fatalf("failures: %v", fails[0])
	}
	if len(got) != 25 {
		t.Fatalf("%d samples, want 25", len(got))
	}
	for i, s := range got {
		if want := fmt.Sprintf("train-00003/%08d", i); s.Key != want {
			t.Fatalf("sample %d key %q, want %q", i, s.Key, want)
		}
		if string(s.Files["jpg"]) != fmt.Sprintf("\xff\xd8jpeg-%d", i) || string(s.Files["cls"]) != fmt.Sprint(i%7) {
			t.Fatalf("sample %d: %q", i, s.Files)
		}
		if len(s.Files) != 2 {
			t.Fatalf("sample %d has members %v: want jpg and cls only", i, s.Files)
		}
	}
}

func TestTextWithNullLabels(t *testing.T) {
	rows := make([]textRow, 30)
	for i := range rows {
		rows[i].Text = fmt.Sprintf("line %d", i)
		if i%3 != 0 {
			v := int32(i)
			rows[i].Label = &v
		}
	}
	got, fails := readAll(t, write(t, rows, 7, pq.Compression(&pq.Zstd)), "t.parquet", nil, Limits{})
	if len(fails) > 0 || len(got) != 30 {
		t.Fatalf("%d samples, failures %v", len(got), fails)
	}
	for i, s := range got {
		_, hasLabel := s.Files["cls"]
		if string(s.Files["txt"]) != fmt.Sprintf("line %d", i) || hasLabel != (i%3 != 0) {
			t.Fatalf("sample %d: %q", i, s.Files)
		}
	}
}

func TestNamedColumns(t *testing.T) {
	data := write(t, imageRows(5), 10)
	got, fails := readAll(t, data, "x.parquet", map[string]string{"png": "image.bytes", "txt": "notes"}, Limits{})
	if len(fails) > 0 || len(got) != 5 {
		t.Fatalf("%d samples, failures %v", len(got), fails)
	}
	if len(got[0].Files["png"]) == 0 || len(got[0].Files["txt"]) != 1000 || len(got[0].Files) != 2 {
		t.Fatalf("members %v", got[0].Files)
	}
}

func TestMissingColumnIsNamed(t *testing.T) {
	data := write(t, imageRows(5), 10)
	_, fails := readAll(t, data, "ds/a.parquet", map[string]string{"txt": "caption"}, Limits{})
	if len(fails) != 1 || fails[0].Key != "a" || !strings.Contains(fails[0].Reason, `no column "caption" (for member txt)`) ||
		!strings.Contains(fails[0].Reason, "ds/a.parquet") || !strings.Contains(fails[0].Reason, `"notes"`) {
		t.Fatalf("got %v", fails)
	}
	// None of the default columns.
	type other struct {
		A string `parquet:"a"`
	}
	_, fails = readAll(t, write(t, []other{{"x"}}, 10), "b.parquet", nil, Limits{})
	if len(fails) != 1 || !strings.Contains(fails[0].Reason, "none of the columns image, label, text") {
		t.Fatalf("got %v", fails)
	}
}

// TestReadsOnlyTheNamedColumns: a large column not named is not read.
func TestReadsOnlyTheNamedColumns(t *testing.T) {
	rows := imageRows(200)
	for i := range rows {
		rows[i].Notes = strings.Repeat(fmt.Sprint(i), 20000) // ~50 KB a row, unread
	}
	data := write(t, rows, 50)
	cr := &countingReader{r: bytes.NewReader(data)}
	rd, err := Open(cr, int64(len(data)), "p.parquet", nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	var projected int64
	for _, g := range rd.file.Metadata().RowGroups {
		for _, c := range rd.cols {
			projected += g.Columns[c.leaf.Index()].MetaData.TotalCompressedSize
		}
	}
	// The footer (large here: it holds the notes column's statistics) is
	// read with the probe, then whole when it does not fit.
	footer := min(int64(len(data)), TailBytes)
	if meta := int64(binary.LittleEndian.Uint32(data[len(data)-8:])); meta+8 > footer {
		footer += meta + 8
	}
	// The label chunk is read with the image's, with the image paths'
	// chunk between them: one request a row group.
	groups := int64(len(rd.file.Metadata().RowGroups))
	if got := cr.bytes.Load(); n != 200 || got < projected+footer || got > projected+footer+groups*maxGap {
		t.Fatalf("read %d rows, %d bytes: want 200 rows, %d bytes (projected chunks %d + footer reads %d) and gaps of at most %d a row group; the file has %d",
			n, got, projected+footer, projected, footer, maxGap, len(data))
	}
	if got := cr.reads.Load(); got != 2+groups {
		t.Fatalf("%d reads, want %d: the tail, the footer, one a row group", got, 2+groups)
	}
	if got := cr.bytes.Load(); got*10 > int64(len(data)) {
		t.Fatalf("read %d of the file's %d bytes", got, len(data))
	}
}

func TestRowGroupOverLimitFailsItsRows(t *testing.T) {
	rows := imageRows(30)
	rows[12].Image.Bytes = bytes.Repeat([]byte{1, 2, 3}, 20000)
	data := write(t, rows, 10)
	got, fails := readAll(t, data, "big.parquet", nil, Limits{MaxRowGroupBytes: 32 << 10})
	if len(got) != 20 || len(fails) != 1 {
		t.Fatalf("%d samples, %d failures (%v): want 20 and 1", len(got), len(fails), fails)
	}
	f := fails[0]
	if f.Key != "big/00000010" || !strings.Contains(f.Reason, "row group 1") || !strings.Contains(f.Reason, "column image") ||
		!strings.Contains(f.Reason, "big.parquet") || !strings.Contains(f.Reason, "rows 10..19 not read") {
		t.Fatalf("failure %v", f)
	}
	if got[10].Key != "big/00000020" {
		t.Fatalf("after the failed group: %s", got[10].Key)
	}
}

func TestPageOverLimit(t *testing.T) {
	rows := []textRow{{Text: strings.Repeat("z", 100000)}, {Text: "short"}}
	_, fails := readAll(t, write(t, rows, 10, pq.Compression(&pq.Zstd)), "z.parquet", nil, Limits{MaxPageBytes: 4096})
	if len(fails) != 1 || !strings.Contains(fails[0].Reason, "over the 4096-byte page limit") || !strings.Contains(fails[0].Reason, "column text") {
		t.Fatalf("got %v", fails)
	}
}

func TestCorruptFiles(t *testing.T) {
	good := write(t, imageRows(20), 5)
	footerLen := func(b []byte) []byte { return b[len(b)-8 : len(b)-4] }
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":     {nil, "too short"},
		"not magic": {[]byte("hello, this is not parquet at all"), "does not end in PAR1"},
		"truncated": {good[:len(good)/2], "does not end in PAR1"},
		"huge footer": {func() []byte {
			b := bytes.Clone(good)
			copy(footerLen(b), []byte{0xff, 0xff, 0xff, 0x7f})
			return b
		}(), "over the 8388608-byte limit"},
		// A list header of a few bytes that declares 2^31 row groups.
		"hostile list": {append([]byte("PAR1\x19\xfc\xff\xff\xff\x07\x00\x00"), []byte("\x08\x00\x00\x00PAR1")...), "elements in"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, fails := readAll(t, c.data, "c.parquet", nil, Limits{})
			if len(fails) != 1 || !strings.Contains(fails[0].Reason, c.want) || !strings.Contains(fails[0].Reason, "c.parquet") {
				t.Fatalf("got %v, want one failure with %q", fails, c.want)
			}
		})
	}
	// Every byte of the column data flipped in turn: rows fail, nothing
	// panics, and every row is either read or named.
	for i := 4; i < len(good)-8; i += 7 {
		b := bytes.Clone(good)
		b[i] ^= 0x5a
		got, fails := readAll(t, b, "f.parquet", nil, Limits{})
		if len(fails) == 0 && len(got) != 20 {
			t.Fatalf("flip at %d: %d rows and no failure", i, len(got))
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add(write(f, imageRows(6), 3))
	rows := []textRow{{Text: "a"}, {Text: "bb"}, {Text: "ccc"}}
	f.Add(write(f, rows, 2, pq.Compression(&pq.Snappy)))
	f.Add(write(f, rows, 2, pq.Compression(&pq.Gzip)))
	f.Fuzz(func(t *testing.T, data []byte) {
		l := Limits{MaxFooterBytes: 1 << 16, MaxFooterMemory: 1 << 20, MaxRowGroupRows: 1 << 10, MaxRowGroupBytes: 1 << 16, MaxPageBytes: 1 << 16}
		rd, err := Open(bytes.NewReader(data), int64(len(data)), "f.parquet", nil, l)
		if err != nil {
			return
		}
		defer rd.Close()
		for range 1 << 12 {
			if _, err := rd.Next(); errors.Is(err, io.EOF) {
				return
			}
		}
	})
}
