package wire

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Bounds of a job's Parquet column mapping (JobSpec.Columns).
const (
	MaxColumns          = 16
	maxColumnMember     = 32
	maxColumnPathLength = 256
)

// ValidateColumns checks a mapping of sample members to Parquet columns:
// at most MaxColumns, each member 1-32 characters of [A-Za-z0-9_.-] (a
// WebDataset member's extension: "txt", "jpg", "cls"), each column path
// 1-256 printable characters, its parts (nested fields, joined by ".")
// not empty. nil is valid: the function's default mapping.
func ValidateColumns(cols map[string]string) error {
	if len(cols) > MaxColumns {
		return fmt.Errorf("%d columns: want at most %d", len(cols), MaxColumns)
	}
	for _, m := range slices.Sorted(maps.Keys(cols)) {
		if m == "" || len(m) > maxColumnMember || strings.IndexFunc(m, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
		}) >= 0 {
			return fmt.Errorf("member %q: want 1-%d characters of [A-Za-z0-9_.-]", m, maxColumnMember)
		}
		p := cols[m]
		if p == "" || len(p) > maxColumnPathLength || strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return fmt.Errorf("member %s: column %q: want 1-%d printable characters", m, p, maxColumnPathLength)
		}
		if slices.Contains(strings.Split(p, "."), "") {
			return fmt.Errorf("member %s: column %q: an empty part (nested fields are joined by one \".\")", m, p)
		}
	}
	return nil
}

// Columns is a column mapping as a task carries it. A task is compared
// whole (the dispatcher's bookkeeping), and a map is not comparable: this
// holds the pairs sorted by member in an array. In JSON it is the object
// {member: column}.
type Columns struct {
	n     int
	pairs [MaxColumns][2]string
}

// ColumnsOf is m as Columns; a map over MaxColumns (which ValidateColumns
// refuses) keeps the first MaxColumns members.
func ColumnsOf(m map[string]string) Columns {
	var c Columns
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if c.n == MaxColumns {
			break
		}
		c.pairs[c.n] = [2]string{k, m[k]}
		c.n++
	}
	return c
}

// Map is the mapping as a map; nil when there is none.
func (c Columns) Map() map[string]string {
	if c.n == 0 {
		return nil
	}
	m := make(map[string]string, c.n)
	for _, p := range c.pairs[:c.n] {
		m[p[0]] = p[1]
	}
	return m
}

func (c Columns) MarshalJSON() ([]byte, error) {
	if c.n == 0 {
		return []byte("null"), nil
	}
	return json.Marshal(c.Map())
}

func (c *Columns) UnmarshalJSON(b []byte) error {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if len(m) > MaxColumns {
		return fmt.Errorf("%d columns: want at most %d", len(m), MaxColumns)
	}
	*c = ColumnsOf(m)
	return nil
}
