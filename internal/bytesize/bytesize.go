// Package bytesize reads and writes byte counts as Sluice's flags, spec
// files and messages write them: "64MiB", "1.5 GiB", "100MB" in, "512 B",
// "1.5 KiB", "23.4 GiB" (powers of 1024) out.
package bytesize

import (
	"math"
	"strconv"
)

// Format writes n as "512 B", "64.0 KiB", "1.5 GiB", in the powers of 1024
// Parse reads.
func Format(n int64) string {
	if n < 1024 && n > -1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	x := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		x /= 1024
		if math.Abs(x) < 1024 || u == "TiB" {
			return strconv.FormatFloat(x, 'f', 1, 64) + " " + u
		}
	}
	return ""
}
