package bytesize

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
)

var sizePattern = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|B)?$`)

var sizeUnits = map[string]float64{"": 1, "B": 1,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}

// Want says what a byte count may be.
const Want = "want a byte count: an integer or a size such as 64MiB, 1GiB, 100MB"

// Parse reads a byte count as job spec files and flags write it: an
// integer, or a number with a unit of B, KiB, MiB, GiB, TiB (powers of
// 1024) or KB, MB, GB, TB (of 1000), such as "64MiB" or "1.5 GiB".
func Parse(s string) (int64, error) {
	m := sizePattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, errors.New(Want)
	}
	if m[2] == "" && !strings.Contains(m[1], ".") {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return 0, errors.New("too large")
		}
		return n, nil
	}
	x, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, errors.New(Want)
	}
	x *= sizeUnits[m[2]]
	if x >= math.MaxInt64/2 {
		return 0, errors.New("too large")
	}
	return int64(x), nil
}
