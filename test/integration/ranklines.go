package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// What clients/python/tests/ranks.py leaves, read back: each rank's
// "epoch step source key" lines and the state_dict it checkpointed. The
// resume scenarios here and on the real cluster (test/e2e) check them.

// LoaderState is the part of sluice.Loader's state_dict the checks need:
// the next step the checkpointed model would have taken.
type LoaderState struct {
	Epoch int `json:"epoch"`
	Step  int `json:"step"`
}

// Before reports whether l's step comes before the checkpoint's.
func (s LoaderState) Before(l KeyLine) bool {
	return l.Epoch < s.Epoch || l.Epoch == s.Epoch && l.Step < s.Step
}

// ReadLoaderStateFile reads a state_dict ranks.py saved.
func ReadLoaderStateFile(t *testing.T, path string) LoaderState {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s LoaderState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

// KeyLine is one of ranks.py's "epoch step source key" lines (key "-":
// a step of zero rows).
type KeyLine struct {
	Epoch, Step, Source int
	Key                 string
}

// ReadRankLines reads each rank's lines of run that keep (nil: all) keeps.
func ReadRankLines(t *testing.T, dir, run string, world int, keep func(KeyLine) bool) [][]KeyLine {
	t.Helper()
	out := make([][]KeyLine, world)
	for r := range world {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("%s-rank%d.keys", run, r)))
		if errors.Is(err, os.ErrNotExist) {
			continue // a rank that took nothing
		} else if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l KeyLine
			if _, err := fmt.Sscanf(sc.Text(), "%d %d %d %s", &l.Epoch, &l.Step, &l.Source, &l.Key); err != nil {
				t.Fatalf("%s rank %d: line %q: %v", run, r, sc.Text(), err)
			}
			if keep == nil || keep(l) {
				out[r] = append(out[r], l)
			}
		}
		f.Close()
	}
	return out
}

// StdoutRanks is what ranks.py --out - printed (a trainer pod's log):
// each rank's lines, which ranks said they were done, and the bytes of the
// arrays the done ones took.
type StdoutRanks struct {
	Lines [][]KeyLine
	Done  []bool
	Bytes int64
}

// ParseStdoutRanks reads ranks.py's "R epoch step source key" lines and
// its "R done: bytes=N" ones. A rank's "R error: ..." is an error; other
// lines (a runtime's warnings) are left out.
func ParseStdoutRanks(out string, world int) (StdoutRanks, error) {
	s := StdoutRanks{Lines: make([][]KeyLine, world), Done: make([]bool, world)}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		r, convErr := strconv.Atoi(f[0])
		if convErr != nil || r < 0 || r >= world {
			continue
		}
		switch {
		case f[1] == "done:":
			n, err := doneBytes(strings.Join(f[2:], " "))
			if err != nil {
				return s, fmt.Errorf("rank %d: %q: %v", r, line, err)
			}
			s.Done[r] = true
			s.Bytes += n
		case f[1] == "error:":
			return s, fmt.Errorf("rank %d: %s", r, line)
		case len(f) == 5:
			var l KeyLine
			if _, err := fmt.Sscanf(strings.Join(f[1:], " "), "%d %d %d %s", &l.Epoch, &l.Step, &l.Source, &l.Key); err != nil {
				return s, fmt.Errorf("rank %d: line %q: %v", r, line, err)
			}
			s.Lines[r] = append(s.Lines[r], l)
		}
	}
	return s, nil
}

// ReadRankBytes is the bytes of the arrays run's ranks took, from their
// .done files; a rank not done is an error.
func ReadRankBytes(dir, run string, world int) (int64, error) {
	var total int64
	for r := range world {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-rank%d.done", run, r)))
		if err != nil {
			return 0, err
		}
		n, err := doneBytes(string(b))
		if err != nil {
			return 0, fmt.Errorf("%s rank %d: %v", run, r, err)
		}
		total += n
	}
	return total, nil
}

func doneBytes(s string) (int64, error) {
	v, ok := strings.CutPrefix(strings.TrimSpace(s), "bytes=")
	if !ok {
		return 0, fmt.Errorf("%q: want bytes=N", s)
	}
	return strconv.ParseInt(v, 10, 64)
}

// CountLines counts the samples of ranks' lines.
func CountLines(ranks [][]KeyLine) int {
	n := 0
	for _, ls := range ranks {
		for _, l := range ls {
			if l.Key != "-" {
				n++
			}
		}
	}
	return n
}

// CheckResumed checks what the model saw (before: the first run's lines
// before the checkpoint; after: the last run's): every sample of every
// one of epochs once (keys: "source/key" of an epoch's samples, or nil
// when only their number total is known), and every rank of each run
// taking the same steps in order: the first run's from the start to the
// checkpoint, the last's from it to the end.
func CheckResumed(before, after [][]KeyLine, ckpt LoaderState, keys []string, total, epochs int) error {
	var errs []error
	seen := map[string]int{}
	for _, run := range [][][]KeyLine{before, after} {
		for _, ls := range run {
			for _, l := range ls {
				if l.Key != "-" {
					seen[fmt.Sprintf("%d/%d/%s", l.Epoch, l.Source, l.Key)]++
				}
			}
		}
	}
	dups := 0
	var dupKeys []string
	for k, c := range seen {
		if c > 1 {
			dups += c - 1
			dupKeys = append(dupKeys, k)
		}
	}
	if dups > 0 {
		slices.Sort(dupKeys)
		errs = append(errs, fmt.Errorf("%d samples delivered twice or more: %s", dups, first(dupKeys, 8)))
	}
	if want := epochs * total; len(seen) != want {
		errs = append(errs, fmt.Errorf("%d distinct samples seen, want %d", len(seen), want))
	}
	if keys != nil {
		var lost []string
		for e := range epochs {
			for _, k := range keys {
				if seen[strconv.Itoa(e)+"/"+k] == 0 {
					lost = append(lost, strconv.Itoa(e)+"/"+k)
				}
			}
		}
		if len(lost) > 0 {
			errs = append(errs, fmt.Errorf("%d samples lost: %s", len(lost), first(lost, 8)))
		}
	}
	errs = append(errs, checkStepOrder("before the checkpoint", before, [2]int{0, 0}, &[2]int{ckpt.Epoch, ckpt.Step}))
	errs = append(errs, checkStepOrder("after the resume", after, [2]int{ckpt.Epoch, ckpt.Step}, nil))
	return errors.Join(errs...)
}

// checkStepOrder checks that every rank took the same steps, from start
// on in order (an epoch's next step, or the next epoch's first), and
// before end (nil: no bound).
func checkStepOrder(what string, ranks [][]KeyLine, start [2]int, end *[2]int) error {
	var ref [][2]int
	for r, ls := range ranks {
		var steps [][2]int
		for _, l := range ls {
			s := [2]int{l.Epoch, l.Step}
			if len(steps) == 0 || steps[len(steps)-1] != s {
				steps = append(steps, s)
			}
		}
		for i, s := range steps {
			if i == 0 {
				if s != start {
					return fmt.Errorf("%s: rank %d's first step is %v, want %v (steps %v)", what, r, s, start, steps)
				}
				continue
			}
			prev := steps[i-1]
			if s != [2]int{prev[0], prev[1] + 1} && s != [2]int{prev[0] + 1, 0} {
				return fmt.Errorf("%s: rank %d took step %v after %v (steps %v)", what, r, s, prev, steps)
			}
		}
		if end != nil && len(steps) > 0 {
			if last := steps[len(steps)-1]; last[0] > end[0] || last[0] == end[0] && last[1] >= end[1] {
				return fmt.Errorf("%s: rank %d took step %v, at or past the checkpoint's %v", what, r, last, *end)
			}
		}
		if r == 0 {
			ref = steps
		} else if !slices.Equal(steps, ref) {
			return fmt.Errorf("%s: rank %d took steps %v, rank 0 %v", what, r, steps, ref)
		}
	}
	return nil
}
