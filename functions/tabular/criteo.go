package tabular

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The Criteo layout.
const (
	NumDense   = 13
	NumSparse  = 26
	NumColumns = 1 + NumDense + NumSparse
)

// DefaultBuckets is the default bucket count of every categorical column.
const DefaultBuckets = 1 << 20

// CriteoOptions say how to turn a line into tensors.
type CriteoOptions struct {
	// DenseFill replaces a missing integer feature (it is not log1p'd).
	DenseFill float32
	// Log1p maps a present integer x to log(1 + max(x, 0)).
	Log1p bool
	// Buckets holds the hash bucket count of C1..C26, each 1..MaxInt64.
	Buckets []uint64
}

// DefaultCriteoOptions: missing dense features 0, log1p on, 2^20 buckets
// per categorical column.
func DefaultCriteoOptions() CriteoOptions {
	b := make([]uint64, NumSparse)
	for i := range b {
		b[i] = DefaultBuckets
	}
	return CriteoOptions{DenseFill: 0, Log1p: true, Buckets: b}
}

// Validate checks there are 26 bucket counts, each in 1..MaxInt64 (the
// indexes are int64).
func (o CriteoOptions) Validate() error {
	if len(o.Buckets) != NumSparse {
		return fmt.Errorf("criteo options: %d bucket counts, want %d (one per categorical column)", len(o.Buckets), NumSparse)
	}
	for i, b := range o.Buckets {
		if b < 1 || b > math.MaxInt64 {
			return fmt.Errorf("criteo options: bucket count %d of %s: want 1..%d", b, ColumnName(1+NumDense+i), int64(math.MaxInt64))
		}
	}
	if math.IsNaN(float64(o.DenseFill)) || math.IsInf(float64(o.DenseFill), 0) {
		return fmt.Errorf("criteo options: dense fill %v: want a finite number", o.DenseFill)
	}
	return nil
}

// ColumnName names column i (0-based) of a line: "label", "I1".."I13",
// "C1".."C26".
func ColumnName(i int) string {
	switch {
	case i == 0:
		return "label"
	case i >= 1 && i <= NumDense:
		return "I" + strconv.Itoa(i)
	case i > NumDense && i < NumColumns:
		return "C" + strconv.Itoa(i-NumDense)
	}
	return "column " + strconv.Itoa(i+1)
}

// HashCategorical is a categorical value's index: 64-bit FNV-1a of raw,
// modulo buckets (see the package documentation). buckets must be in
// 1..MaxInt64.
func HashCategorical(raw []byte, buckets uint64) int64 {
	const (
		offset64 = 0xcbf29ce484222325
		prime64  = 0x100000001b3
	)
	h := uint64(offset64)
	for _, c := range raw {
		h ^= uint64(c)
		h *= prime64
	}
	return int64(h % buckets)
}

// ParseCriteo parses one line (a trailing "\n" or "\r\n" is allowed). An
// error names the column and quotes the value, e.g.
// `column 5 (I4): "x1": not an integer`.
func ParseCriteo(line []byte, o CriteoOptions) (label int64, dense [NumDense]float32, sparse [NumSparse]int64, err error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(o.Buckets) != NumSparse {
		return 0, dense, sparse, fmt.Errorf("criteo options: %d bucket counts, want %d", len(o.Buckets), NumSparse)
	}
	if n := bytes.Count(line, []byte{'\t'}) + 1; n != NumColumns {
		return 0, dense, sparse, fmt.Errorf("%d tab-separated columns, want %d", n, NumColumns)
	}
	rest := line
	next := func() []byte {
		i := bytes.IndexByte(rest, '\t')
		if i < 0 {
			col := rest
			rest = nil
			return col
		}
		col := rest[:i]
		rest = rest[i+1:]
		return col
	}

	switch col := next(); {
	case len(col) == 1 && (col[0] == '0' || col[0] == '1'):
		label = int64(col[0] - '0')
	case len(col) == 0:
		return 0, dense, sparse, columnError(0, col, "missing")
	default:
		return 0, dense, sparse, columnError(0, col, "want 0 or 1")
	}
	for i := range dense {
		col := next()
		if len(col) == 0 {
			dense[i] = o.DenseFill
			continue
		}
		x, err := parseInt(col)
		if err != nil {
			return 0, dense, sparse, columnError(1+i, col, err.Error())
		}
		if o.Log1p {
			dense[i] = float32(math.Log1p(float64(max(x, 0))))
		} else {
			dense[i] = float32(x)
		}
	}
	for i := range sparse {
		b := o.Buckets[i]
		if b < 1 || b > math.MaxInt64 {
			return 0, dense, sparse, fmt.Errorf("criteo options: bucket count %d of %s: want 1..%d", b, ColumnName(1+NumDense+i), int64(math.MaxInt64))
		}
		sparse[i] = HashCategorical(next(), b)
	}
	return label, dense, sparse, nil
}

func columnError(i int, val []byte, reason string) error {
	const maxShown = 32
	shown := string(val)
	if len(shown) > maxShown {
		shown = shown[:maxShown] + "..."
	}
	return fmt.Errorf("column %d (%s): %q: %s", i+1, ColumnName(i), shown, reason)
}

var (
	errNotInt      = errors.New("not an integer")
	errIntOverflow = errors.New("integer out of int64 range")
)

// parseInt is strconv.ParseInt(string(b), 10, 64) without the allocation.
func parseInt(b []byte) (int64, error) {
	neg := false
	if b[0] == '-' || b[0] == '+' {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, errNotInt
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errNotInt
		}
		if u > (math.MaxUint64-9)/10 {
			return 0, errIntOverflow
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case !neg && u > math.MaxInt64, neg && u > 1<<63:
		return 0, errIntOverflow
	case neg:
		return -int64(u), nil
	}
	return int64(u), nil
}
