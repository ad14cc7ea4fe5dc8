package wire

import (
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
