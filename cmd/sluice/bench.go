package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/functions/pipeline"
)

// benchReport is what `sluice bench ops` prints (one JSON object with --json).
type benchReport struct {
	Pipeline string `json:"pipeline"`
	// Decoder is the JPEG decoder compiled in: "go" or "libjpeg-turbo".
	Decoder string `json:"decoder"`
	Input   string `json:"input"`
	// Samples is how many samples the input holds; Failed how many of them
	// the pipeline rejects (they are left out of the timed passes, and
	// FirstFailure says why the first one failed).
	Samples      int    `json:"samples"`
	Failed       int    `json:"failed"`
	FirstFailure string `json:"first_failure,omitempty"`
	// Processed samples in Seconds of timed passes on one core.
	Processed           int     `json:"processed"`
	Seconds             float64 `json:"seconds"`
	SamplesPerSPerCore  float64 `json:"samples_per_s_per_core"`
	NsPerSample         float64 `json:"ns_per_sample"`
	BytesAllocPerSample float64 `json:"bytes_alloc_per_sample"`
	AllocsPerSample     float64 `json:"allocs_per_sample"`
	GCs                 uint32  `json:"gcs"`
	// Ops is the time per sample of each op, from separate profiled passes
	// (timing each op costs a little, so they are not the timed passes).
	Ops []benchOp `json:"ops,omitempty"`
	// HeapInUseBytes is the Go heap in use after the timed passes;
	// MaxRSSBytes the process's peak resident memory (input included),
	// where the OS reports it.
	HeapInUseBytes uint64 `json:"heap_inuse_bytes"`
	MaxRSSBytes    uint64 `json:"max_rss_bytes,omitempty"`
	GoVersion      string `json:"go_version"`
	GOARCH         string `json:"goarch"`
	CPUs           int    `json:"cpus"`
}

// benchOp is one op's share of a sample's time.
type benchOp struct {
	Op          string  `json:"op"`
	NsPerSample float64 `json:"ns_per_sample"`
	Share       float64 `json:"share"`
}

func runBenchOps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench ops", stderr)
	name := fs.String("pipeline", "imagenet-train", "built-in pipeline ("+strings.Join(pipeline.Names(), ", ")+") or a YAML/JSON spec file")
	input := fs.String("input", "", "a directory of sample files (KEY.EXT, grouped by key as in a shard) or a WebDataset tar shard")
	seconds := fs.Float64("seconds", 10, "time budget of the timed passes (the pass that crosses it is finished)")
	seed := fs.Uint64("seed", 1, "job seed the per-sample seeds derive from")
	maxPixels := fs.Int("max-pixels", image.DefaultMaxPixels, "largest image, in pixels")
	memFlag := registerMemoryLimitFlag(fs)
	vocabDir := fs.String("vocab-dir", "", "the only directory WordPiece vocab and BPE tokenizer files are read from (a spec names a file within it); empty: builtin only")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	cpuProfile := fs.String("cpuprofile", "", "write a pprof CPU profile of the timed passes to this file")
	var memLimit int64
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: sluice bench ops --pipeline NAME|FILE --input DIR|TAR [--json] [--seconds N]\n\n"+
			"Measures a pipeline's throughput on one core: the input's samples are read into\n"+
			"memory and processed in passes, with GOMAXPROCS=1, until the time budget is\n"+
			"spent; then profiled passes time each op. Pin the process to one CPU (taskset)\n"+
			"for a per-core figure. The JPEG decoder is the build's: go, or libjpeg-turbo\n"+
			"with -tags turbojpeg.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args,
		func() error {
			if *input == "" {
				return errors.New("--input is required")
			}
			return nil
		},
		func() error {
			if !(*seconds > 0 && *seconds <= 3600) {
				return fmt.Errorf("--seconds %g: want more than 0, at most 3600", *seconds)
			}
			return nil
		},
		intRange("max-pixels", maxPixels, 1, 1<<31-1),
		memFlag.resolve(&memLimit, new(string)),
	); err != nil {
		return err
	}
	p, _, err := loadPipelineFlag(*name, pipeline.Options{MaxPixels: *maxPixels, DecodeBudget: image.BudgetFor(memLimit),
		VocabDir: *vocabDir})
	if err != nil {
		return err
	}
	samples, err := benchSamples(*input)
	if err != nil {
		return err
	}
	var prof io.Writer
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("creating cpu profile: %w", err)
		}
		defer f.Close()
		prof = f
	}
	rep, err := benchPipeline(ctx, p, samples, *seed, time.Duration(*seconds*float64(time.Second)), prof)
	if err != nil {
		return err
	}
	rep.Input = *input
	if *asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	printBenchReport(stdout, rep)
	return nil
}

func printBenchReport(w io.Writer, rep benchReport) {
	fmt.Fprintf(w, "pipeline %s, decoder %s, input %s: %d samples", rep.Pipeline, rep.Decoder, rep.Input, rep.Samples)
	if rep.Failed > 0 {
		fmt.Fprintf(w, " (%d failed and left out; first: %s)", rep.Failed, rep.FirstFailure)
	}
	fmt.Fprintf(w, "\n%.1f samples/s per core: %d samples in %.2fs, %.0f µs each\n",
		rep.SamplesPerSPerCore, rep.Processed, rep.Seconds, rep.NsPerSample/1e3)
	fmt.Fprintf(w, "%.0f bytes in %.1f allocations per sample, %d GCs, heap in use %.1f MiB",
		rep.BytesAllocPerSample, rep.AllocsPerSample, rep.GCs, float64(rep.HeapInUseBytes)/(1<<20))
	if rep.MaxRSSBytes > 0 {
		fmt.Fprintf(w, ", peak RSS %.1f MiB (input included)", float64(rep.MaxRSSBytes)/(1<<20))
	}
	fmt.Fprintln(w)
	if len(rep.Ops) > 0 {
		fmt.Fprintln(w, "per op:")
		for _, o := range rep.Ops {
			fmt.Fprintf(w, "  %-24s %9.1f µs  %5.1f%%\n", o.Op, o.NsPerSample/1e3, 100*o.Share)
		}
	}
}

// benchPipeline runs p over samples in passes until budget is spent, on one
// P. A first, untimed pass warms the buffer pools and finds the samples the
// pipeline rejects, which the timed passes leave out. If p can time its
// ops, profiled passes (a quarter of the budget, at least one pass) follow.
func benchPipeline(ctx context.Context, p pipeline.Pipeline, samples []wds.Sample, jobSeed uint64, budget time.Duration, cpuProfile io.Writer) (benchReport, error) {
	rep := benchReport{Pipeline: p.Name(), Decoder: image.Decoder, Samples: len(samples),
		GoVersion: runtime.Version(), GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU()}
	seeds := make([]uint64, len(samples))
	var good []int
	for i, s := range samples {
		seeds[i] = pipeline.SampleSeed(jobSeed, 0, s.Key)
		if _, err := p.Process(s, seeds[i]); err != nil {
			rep.Failed++
			if rep.FirstFailure == "" {
				rep.FirstFailure = fmt.Sprintf("sample %s: %v", s.Key, err)
			}
			continue
		}
		good = append(good, i)
	}
	if len(good) == 0 {
		return rep, fmt.Errorf("every sample failed, the first with: %s", rep.FirstFailure)
	}

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if cpuProfile != nil {
		if err := pprof.StartCPUProfile(cpuProfile); err != nil {
			return rep, fmt.Errorf("starting cpu profile: %w", err)
		}
	}
	start := time.Now()
	deadline := start.Add(budget)
	n := 0
	for {
		for _, i := range good {
			if _, err := p.Process(samples[i], seeds[i]); err != nil {
				return rep, fmt.Errorf("sample %s failed on a later pass: %w", samples[i].Key, err)
			}
		}
		n += len(good)
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if !time.Now().Before(deadline) {
			break
		}
	}
	elapsed := time.Since(start)
	if cpuProfile != nil {
		pprof.StopCPUProfile()
	}
	runtime.ReadMemStats(&after)

	rep.Processed = n
	rep.Seconds = elapsed.Seconds()
	rep.SamplesPerSPerCore = float64(n) / elapsed.Seconds()
	rep.NsPerSample = float64(elapsed.Nanoseconds()) / float64(n)
	rep.BytesAllocPerSample = float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
	rep.AllocsPerSample = float64(after.Mallocs-before.Mallocs) / float64(n)
	rep.HeapInUseBytes = after.HeapInuse
	rep.GCs = after.NumGC - before.NumGC

	if prof, ok := p.(pipeline.Profiler); ok {
		ops, err := benchOps(ctx, prof, samples, seeds, good, budget/4)
		if err != nil {
			return rep, err
		}
		rep.Ops = ops
	}
	rep.MaxRSSBytes = maxRSS()
	return rep, nil
}

// benchOps times each op of prof over whole passes until budget is spent.
func benchOps(ctx context.Context, prof pipeline.Profiler, samples []wds.Sample, seeds []uint64, good []int, budget time.Duration) ([]benchOp, error) {
	names := prof.OpNames()
	spent := make([]time.Duration, len(names))
	deadline := time.Now().Add(budget)
	n := 0
	for {
		for _, i := range good {
			if _, err := prof.ProcessProfiled(samples[i], seeds[i], spent); err != nil {
				return nil, fmt.Errorf("sample %s failed on a profiled pass: %w", samples[i].Key, err)
			}
		}
		n += len(good)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !time.Now().Before(deadline) {
			break
		}
	}
	var total time.Duration
	for _, d := range spent {
		total += d
	}
	ops := make([]benchOp, len(names))
	for i, name := range names {
		ops[i] = benchOp{Op: name, NsPerSample: float64(spent[i].Nanoseconds()) / float64(n)}
		if total > 0 {
			ops[i].Share = float64(spent[i]) / float64(total)
		}
	}
	return ops, nil
}

// maxRSS is the process's peak resident set (Linux's VmHWM), or 0 where
// /proc does not say.
func maxRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// benchSamples reads every sample of a tar shard or a directory (whose
// files group into samples by key, as in a shard) into memory, in key order.
func benchSamples(path string) ([]wds.Sample, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading input: %w", err)
	}
	var out []wds.Sample
	if st.IsDir() {
		out, err = benchDirSamples(path)
	} else {
		out, err = benchTarSamples(path)
	}
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("input %s holds no samples", path)
	}
	return out, nil
}

func benchTarSamples(path string) ([]wds.Sample, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading input: %w", err)
	}
	var out []wds.Sample
	r := wds.NewReader(bytes.NewReader(data), 0)
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		var se *wds.SampleError
		if errors.As(err, &se) {
			continue // an unreadable sample cannot be timed; the reader has said which
		}
		if err != nil {
			return nil, fmt.Errorf("reading shard %s: %w", path, err)
		}
		out = append(out, s)
	}
}

func benchDirSamples(dir string) ([]wds.Sample, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading input: %w", err)
	}
	byKey := map[string]*wds.Sample{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		key, ext := wds.SplitKey(e.Name())
		if ext == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading input: %w", err)
		}
		s := byKey[key]
		if s == nil {
			s = &wds.Sample{Key: key, Files: map[string][]byte{}}
			byKey[key] = s
		}
		s.Files[ext] = b
	}
	out := make([]wds.Sample, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		out = append(out, *byKey[k])
	}
	return out, nil
}
