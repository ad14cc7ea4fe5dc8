package main

import (
	"flag"
	"fmt"

	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/internal/bytesize"
	"github.com/sluice-project/sluice/internal/memlimit"
)

// memoryLimitFlag is --memory-limit of the commands that decode images:
// the process's memory limit, which sizes its decode budget
// (image.BudgetFor).
type memoryLimitFlag struct{ value *string }

func registerMemoryLimitFlag(fs *flag.FlagSet) memoryLimitFlag {
	return memoryLimitFlag{fs.String("memory-limit", "", fmt.Sprintf(
		"this process's memory limit (e.g. 2GiB); the images decoded at once hold at most 1/%d of it "+
			"(default: the lower of the cgroup's limit and GOMEMLIMIT, else %s)",
		image.BudgetShare, bytesize.Format(memlimit.Default)))}
}

// minMemoryLimit is the least --memory-limit taken: its decode budget
// still holds a 12-megapixel JPEG.
const minMemoryLimit = 128 << 20

// resolve sets limit, and source to where it came from: "--memory-limit",
// what memlimit.Detect found, or "default".
func (f memoryLimitFlag) resolve(limit *int64, source *string) func() error {
	return func() error {
		if *f.value == "" {
			n, src, ok := memlimit.Detect()
			if !ok {
				n, src = memlimit.Default, "default"
			}
			*limit, *source = n, src
			return nil
		}
		n, err := bytesize.Parse(*f.value)
		if err != nil || n < minMemoryLimit {
			return fmt.Errorf("--memory-limit %q: %s", *f.value, errOr(err, "want at least "+bytesize.Format(minMemoryLimit)))
		}
		*limit, *source = n, "--memory-limit"
		return nil
	}
}
