package tabular

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Golden values from the Python snippet in doc.go.
func TestHashCategoricalGolden(t *testing.T) {
	cases := []struct {
		raw     string
		buckets uint64
		want    int64
	}{
		{"", 1 << 20, 140069},
		{"", 1000003, 801432},
		{"a", math.MaxInt64, 3414815163700866189}, // 0xaf63dc4c8601ec8c mod 2^63-1
		{"68fd1e64", math.MaxInt64, 1938573664431018461},
		{"68fd1e64", 1 << 20, 430557},
		{"80e26c9b", 1 << 20, 858806},
		{"fb936136", 1000003, 55371},
		{"fb936136", 1, 0},
	}
	for _, c := range cases {
		if got := HashCategorical([]byte(c.raw), c.buckets); got != c.want {
			t.Errorf("HashCategorical(%q, %d) = %d, want %d", c.raw, c.buckets, got, c.want)
		}
	}
	// Raw bytes: case matters.
	if HashCategorical([]byte("68FD1E64"), 1<<20) == HashCategorical([]byte("68fd1e64"), 1<<20) {
		t.Error("upper and lower case hex hash alike")
	}
}

const goldenLine = "1\t5\t-3\t\t0\t1234567\t\t2\t\t\t\t\t\t99\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t25c83c98\t\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407"

func goldenOptions() CriteoOptions {
	o := DefaultCriteoOptions()
	o.Buckets[0], o.Buckets[1], o.Buckets[2] = 1, 10, 1000003
	return o
}

func TestParseCriteoGolden(t *testing.T) {
	wantDense := [NumDense]float32{1.7917594909667969, 0, 0, 0, 14.02623176574707, 0, 1.0986123085021973, 0, 0, 0, 0, 0, 4.605170249938965}
	wantSparse := [NumSparse]int64{0, 4, 55371, 981741, 770952, 140069, 404363, 785638, 558604, 326450, 462777, 578241, 970165,
		684055, 463122, 656647, 677469, 773410, 201706, 397563, 758617, 5434, 140069, 966166, 981373, 1041864}
	for _, ending := range []string{"", "\n", "\r\n"} {
		label, dense, sparse, err := ParseCriteo([]byte(goldenLine+ending), goldenOptions())
		if err != nil {
			t.Fatalf("ending %q: %v", ending, err)
		}
		if label != 1 {
			t.Errorf("label %d, want 1", label)
		}
		for i := range dense {
			if math.Float32bits(dense[i]) != math.Float32bits(wantDense[i]) {
				t.Errorf("ending %q: I%d = %v, want %v", ending, i+1, dense[i], wantDense[i])
			}
		}
		if diff := cmp.Diff(wantSparse, sparse); diff != "" {
			t.Errorf("ending %q: sparse (-want +got):\n%s", ending, diff)
		}
	}
}

// line builds a Criteo line from its label, dense and sparse columns.
func line(label string, dense []string, sparse []string) []byte {
	cols := append(append([]string{label}, dense...), sparse...)
	return []byte(strings.Join(cols, "\t"))
}

func filled(n int, v string) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func TestParseCriteoMissingAndOptions(t *testing.T) {
	dense := filled(NumDense, "")
	dense[0], dense[1], dense[2] = "-3", "+7", "0"
	sparse := filled(NumSparse, "")
	sparse[3] = "abcdef01"
	l := line("0", dense, sparse)

	o := DefaultCriteoOptions()
	o.DenseFill = 7.5
	label, d, s, err := ParseCriteo(l, o)
	if err != nil {
		t.Fatal(err)
	}
	// Missing: DenseFill untransformed; negative clamped to 0 before log1p.
	want := [NumDense]float32{0, float32(math.Log1p(7)), 0, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5}
	if label != 0 || d != want {
		t.Errorf("log1p: label %d dense %v, want 0 %v", label, d, want)
	}
	for i, v := range s {
		w := HashCategorical(nil, DefaultBuckets)
		if i == 3 {
			w = HashCategorical([]byte("abcdef01"), DefaultBuckets)
		}
		if v != w {
			t.Errorf("C%d = %d, want %d", i+1, v, w)
		}
	}
	o.Log1p = false
	_, d, _, err = ParseCriteo(l, o)
	if err != nil {
		t.Fatal(err)
	}
	if want := [NumDense]float32{-3, 7, 0, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5}; d != want {
		t.Errorf("no log1p: dense %v, want %v", d, want)
	}
	// Extremes of int64 parse.
	dense[0], dense[1] = "9223372036854775807", "-9223372036854775808"
	_, d, _, err = ParseCriteo(line("1", dense, sparse), o)
	if err != nil || d[0] != float32(math.MaxInt64) || d[1] != float32(math.MinInt64) {
		t.Errorf("int64 extremes: %v %v, %v", d[0], d[1], err)
	}
}

func TestParseCriteoBadLines(t *testing.T) {
	good := func() ([]string, []string) { return filled(NumDense, "1"), filled(NumSparse, "68fd1e64") }
	withDense := func(i int, v string) []byte {
		d, s := good()
		d[i] = v
		return line("1", d, s)
	}
	d, s := good()
	cases := []struct {
		name string
		line []byte
		want string
	}{
		{"39 columns", line("1", d, s[1:]), "39 tab-separated columns, want 40"},
		{"41 columns", line("1", d, append(s, "x")), "41 tab-separated columns, want 40"},
		{"empty", nil, "1 tab-separated columns, want 40"},
		{"space separated", []byte(strings.ReplaceAll(string(line("1", d, s)), "\t", " ")), "1 tab-separated columns, want 40"},
		{"not an integer", withDense(3, "x1"), `column 5 (I4): "x1": not an integer`},
		{"float", withDense(0, "1.5"), `column 2 (I1): "1.5": not an integer`},
		{"sign only", withDense(12, "-"), `column 14 (I13): "-": not an integer`},
		{"space", withDense(1, " 3"), `column 3 (I2): " 3": not an integer`},
		{"overflow", withDense(1, "9223372036854775808"), `column 3 (I2): "9223372036854775808": integer out of int64 range`},
		{"huge", withDense(1, strings.Repeat("9", 40)), `column 3 (I2): "99999999999999999999999999999999...": integer out of int64 range`},
		{"label 2", line("2", d, s), `column 1 (label): "2": want 0 or 1`},
		{"label missing", line("", d, s), `column 1 (label): "": missing`},
		{"label 01", line("01", d, s), `column 1 (label): "01": want 0 or 1`},
	}
	for _, c := range cases {
		_, _, _, err := ParseCriteo(c.line, DefaultCriteoOptions())
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	o := DefaultCriteoOptions()
	o.Buckets[5] = 0
	if _, _, _, err := ParseCriteo(line("1", d, s), o); err == nil || !strings.Contains(err.Error(), "bucket count 0 of C6") {
		t.Errorf("zero buckets: error %v", err)
	}
	if _, _, _, err := ParseCriteo(line("1", d, s), CriteoOptions{}); err == nil || !strings.Contains(err.Error(), "0 bucket counts") {
		t.Errorf("no buckets: error %v", err)
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultCriteoOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	o := DefaultCriteoOptions()
	if d := o.Buckets; len(d) != 26 || d[0] != 1<<20 || !o.Log1p || o.DenseFill != 0 {
		t.Errorf("defaults %+v", o)
	}
	short := DefaultCriteoOptions()
	short.Buckets = short.Buckets[:25]
	zero := DefaultCriteoOptions()
	zero.Buckets[25] = 0
	huge := DefaultCriteoOptions()
	huge.Buckets[0] = math.MaxUint64
	nan := DefaultCriteoOptions()
	nan.DenseFill = float32(math.NaN())
	for _, c := range []struct {
		o    CriteoOptions
		want string
	}{
		{short, "25 bucket counts, want 26"},
		{zero, "bucket count 0 of C26: want 1..9223372036854775807"},
		{huge, "bucket count 18446744073709551615 of C1"},
		{nan, "dense fill NaN"},
	} {
		if err := c.o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
	}
	for i, want := range map[int]string{0: "label", 1: "I1", 13: "I13", 14: "C1", 39: "C26", 40: "column 41"} {
		if got := ColumnName(i); got != want {
			t.Errorf("ColumnName(%d) = %q, want %q", i, got, want)
		}
	}
}

// benchLines are Criteo-like lines with about 10% missing values.
func benchLines(n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 1))
	out := make([][]byte, n)
	for i := range out {
		var b bytes.Buffer
		fmt.Fprintf(&b, "%d", rng.IntN(2))
		for range NumDense {
			b.WriteByte('\t')
			if rng.IntN(10) > 0 {
				fmt.Fprintf(&b, "%d", rng.IntN(2000)-2)
			}
		}
		for range NumSparse {
			b.WriteByte('\t')
			if rng.IntN(10) > 0 {
				fmt.Fprintf(&b, "%08x", rng.Uint32())
			}
		}
		b.WriteByte('\n')
		out[i] = b.Bytes()
	}
	return out
}

func BenchmarkParseCriteo(b *testing.B) {
	lines := benchLines(1024)
	o := DefaultCriteoOptions()
	b.ReportAllocs()
	i, n := 0, 0
	for b.Loop() {
		l := lines[i%len(lines)]
		if _, _, _, err := ParseCriteo(l, o); err != nil {
			b.Fatal(err)
		}
		n += len(l)
		i++
	}
	b.SetBytes(int64(n / i))
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "lines/s")
}
