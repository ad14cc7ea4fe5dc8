package lines

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/format/wds"
)

// item is what Next gave: a sample's key and line, or a failed key.
type item struct {
	Key, Line, Failed string
}

func readAll(t *testing.T, r *Reader) []item {
	t.Helper()
	var out []item
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			if _, err := r.Next(); !errors.Is(err, io.EOF) {
				t.Fatalf("Next after EOF: %v", err)
			}
			return out
		}
		var se *wds.SampleError
		if errors.As(err, &se) {
			out = append(out, item{Failed: se.Key, Line: se.Reason})
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Files) != 1 {
			t.Fatalf("sample %s has %d members", s.Key, len(s.Files))
		}
		out = append(out, item{Key: s.Key, Line: string(s.Files["jsonl"])})
	}
}

func TestLinesAndKeys(t *testing.T) {
	in := "{\"a\":1}\n\n{\"b\":2}\r\n   \n{\"c\":3}"
	got := readAll(t, NewReader(strings.NewReader(in), "data/train/part-00017.jsonl", "jsonl", 0))
	want := []item{
		{Key: "part-00017/00000000", Line: `{"a":1}`},
		// Line 1 is empty: skipped, but counted.
		{Key: "part-00017/00000002", Line: `{"b":2}`},
		// A blank-looking line is not empty: the parser decides.
		{Key: "part-00017/00000003", Line: "   "},
		// The last line needs no newline.
		{Key: "part-00017/00000004", Line: `{"c":3}`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	for _, in := range []string{"", "\n", "\n\n\r\n"} {
		if got := readAll(t, NewReader(strings.NewReader(in), "x.jsonl", "jsonl", 0)); len(got) != 0 {
			t.Errorf("%q: %v, want no samples", in, got)
		}
	}
	// Dots in the base name: only the extension goes.
	if got := readAll(t, NewReader(strings.NewReader("x\n"), "s3dir/a.b.tsv", "jsonl", 0)); got[0].Key != "a.b/00000000" {
		t.Errorf("key %q, want a.b/00000000", got[0].Key)
	}
}

func TestOverlongLineFailsOnlyItself(t *testing.T) {
	long := strings.Repeat("x", 100)
	in := "short\n" + long + "\r\n" + strings.Repeat("y", 10) + "\n" + long
	got := readAll(t, NewReader(strings.NewReader(in), "s.jsonl", "jsonl", 10))
	want := []item{
		{Key: "s/00000000", Line: "short"},
		{Failed: "s/00000001", Line: "line 2 is 100 bytes, over the 10-byte limit"},
		// Exactly at the limit (its "\n" does not count).
		{Key: "s/00000002", Line: strings.Repeat("y", 10)},
		{Failed: "s/00000003", Line: "line 4 is 100 bytes, over the 10-byte limit"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	// Lines far longer than the read buffer, one byte per read.
	huge := strings.Repeat("z", 300<<10)
	in = "a\n" + huge + "\nb\n" + huge[:200<<10] + "\r\nc"
	got = readAll(t, NewReader(iotest.OneByteReader(strings.NewReader(in)), "s.jsonl", "jsonl", 250<<10))
	if len(got) != 5 || got[4].Line != "c" || got[1].Failed != "s/00000001" || got[2].Line != "b" || len(got[3].Line) != 200<<10 || got[3].Key != "s/00000003" {
		t.Errorf("huge lines: %d items", len(got))
	}
	if got := readAll(t, NewReader(strings.NewReader(in), "s.jsonl", "jsonl", 0)); len(got) != 5 || got[4].Line != "c" {
		t.Errorf("default limit: %d items", len(got))
	}
}

func TestReadErrorIsReturned(t *testing.T) {
	r := NewReader(io.MultiReader(strings.NewReader("a\nb"), iotest.ErrReader(errors.New("connection reset"))), "s.tsv", "tsv", 0)
	if s, err := r.Next(); err != nil || s.Key != "s/00000000" || string(s.Files["tsv"]) != "a" {
		t.Fatalf("first line: %+v, %v", s, err)
	}
	_, err := r.Next()
	var se *wds.SampleError
	if err == nil || errors.As(err, &se) || !strings.Contains(err.Error(), "reading line 2: connection reset") {
		t.Fatalf("second Next: %v, want the read error", err)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after a read error: %v, want io.EOF", err)
	}
}

func TestSamplesDoNotAlias(t *testing.T) {
	r := NewReader(bufio.NewReaderSize(strings.NewReader("aaaa\nbbbb\n"), 16), "s.tsv", "tsv", 0)
	a, _ := r.Next()
	b, _ := r.Next()
	if string(a.Files["tsv"]) != "aaaa" || string(b.Files["tsv"]) != "bbbb" {
		t.Errorf("samples %q %q: the first was overwritten", a.Files["tsv"], b.Files["tsv"])
	}
}
