// Command memcheck measures the memory a function replica's preprocessing
// needs: it streams a WebDataset shard from disk through a pipeline, as
// `sluice fn serve` does (one sample in memory per worker, outputs dropped
// instead of sent to the agent in chunks), and prints the process's peak
// resident set and the Go heap's peak. Build it with and without -tags
// turbojpeg to compare the decoders; libjpeg's C allocations show in the
// RSS, not the heap.
//
//	go run ./bench/memcheck --input shard.tar --pipeline imagenet-train --workers 2 --passes 3
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/functions/pipeline"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "memcheck: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	input := flag.String("input", "", "WebDataset tar shard")
	name := flag.String("pipeline", "imagenet-train", "built-in pipeline")
	workers := flag.Int("workers", 2, "samples processed at once")
	passes := flag.Int("passes", 3, "times the shard is streamed")
	flag.Parse()
	if *input == "" || *workers < 1 || *passes < 1 {
		return errors.New("want --input TAR, --workers >= 1, --passes >= 1")
	}
	p, err := pipeline.Lookup(*name, pipeline.Options{})
	if err != nil {
		return err
	}
	var peakHeap, peakSys atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peakHeap.Store(max(peakHeap.Load(), ms.HeapInuse))
			peakSys.Store(max(peakSys.Load(), ms.Sys-ms.HeapReleased))
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	n, failed := 0, 0
	for range *passes {
		f, err := os.Open(*input)
		if err != nil {
			return err
		}
		samples := make(chan wds.Sample)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range *workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for s := range samples {
					_, err := p.Process(s, pipeline.SampleSeed(1, 0, s.Key))
					mu.Lock()
					n++
					if err != nil {
						failed++
					}
					mu.Unlock()
				}
			}()
		}
		r := wds.NewReader(bufio.NewReader(f), 0)
		for {
			s, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				continue
			}
			samples <- s
		}
		close(samples)
		wg.Wait()
		f.Close()
	}
	close(stop)
	<-sampled
	fmt.Printf("pipeline %s, decoder %s, %d workers: %d samples (%d failed) in %.1fs\n",
		*name, image.Decoder, *workers, n, failed, time.Since(start).Seconds())
	fmt.Printf("peak RSS %.1f MiB; Go heap in use at most %.1f MiB, Go runtime memory at most %.1f MiB\n",
		float64(vmHWM())/(1<<20), float64(peakHeap.Load())/(1<<20), float64(peakSys.Load())/(1<<20))
	return nil
}

// vmHWM is the process's peak resident set, from /proc (Linux).
func vmHWM() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
