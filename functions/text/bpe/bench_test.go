package bpe

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchDocs are the corpus lines in documents of 32 lines, each line ending
// in a newline: web-page-sized texts, so that neither side's cost per call
// (node's napi and WASM boundary, most of all) dominates.
func benchDocs(b *testing.B) []string {
	lines := samples(b)[:corpusLines]
	var docs []string
	for i := 0; i < len(lines); i += 32 {
		docs = append(docs, strings.Join(lines[i:min(i+32, len(lines))], "\n")+"\n")
	}
	return docs
}

// cpuTime is the process's CPU time so far: on a busy machine wall time
// also counts other processes' turns on the core.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// refRate is the reference's tokens/s on docs, one thread, timed by
// ref.js around its encode calls only.
func refRate(b *testing.B, dir string, docs []string, args ...string) float64 {
	var in bytes.Buffer
	for _, s := range docs {
		in.WriteByte(':')
		in.WriteString(b64(s))
		in.WriteByte('\n')
	}
	cmd := exec.Command("node", append([]string{"../../../.ci/tokref/ref.js"}, args...)...)
	// One thread: tokenizers' rayon and node's thread pool.
	cmd.Env = append(os.Environ(), "TOKREF_DIR="+dir, "TOKENIZERS_PARALLELISM=false", "RAYON_NUM_THREADS=1", "UV_THREADPOOL_SIZE=1")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("node ref.js %v: %v", args, err)
	}
	var r struct {
		Tokens  float64
		Seconds float64
	}
	if err := json.Unmarshal(out, &r); err != nil {
		b.Fatal(err)
	}
	return r.Tokens / r.Seconds
}

// BenchmarkEncode is tokens/s on one core (run with -cpu 1) against the
// references on the same documents in the same run: ref_tok/s is Hugging
// Face tokenizers' (gpt2) or tiktoken's (cl100k_base) single-thread rate,
// hf_tok/s for cl100k is tokenizers with the same vocab and pattern (Llama
// 3's tokenizer.json is cl100k's regex over its own merges). x_ref is our
// rate over the reference's; tok/cpu-s is ours per second of the
// process's CPU time, steadier than tok/s on a shared machine. Each is run
// with the piece cache off (nocache) and on (cache).
//
//	go test -run '^$' -bench BenchmarkEncode -cpu 1 ./functions/text/bpe/
func BenchmarkEncode(b *testing.B) {
	dir := tokref(b)
	docs := benchDocs(b)
	cases := []struct {
		name string
		load func() *Tokenizer
		refs map[string][]string
	}{
		{"gpt2", func() *Tokenizer { return loadHFFile(b, filepath.Join(dir, "gpt2.json")) },
			map[string][]string{"hf": {"bench-hf", filepath.Join(dir, "gpt2.json"), "no_special"}}},
		{"qwen2_5", func() *Tokenizer { return loadHFFile(b, filepath.Join(dir, "qwen2_5.json")) },
			map[string][]string{"hf": {"bench-hf", filepath.Join(dir, "qwen2_5.json"), "no_special"}}},
		{"cl100k_base", func() *Tokenizer {
			return loadTiktokenFile(b, filepath.Join(dir, "cl100k_base.tiktoken"), "cl100k_base")
		}, map[string][]string{"tiktoken": {"bench-tiktoken", "cl100k_base", "ordinary"}}},
		{"o200k_base", func() *Tokenizer {
			return loadTiktokenFile(b, filepath.Join(dir, "o200k_base.tiktoken"), "o200k_base")
		}, map[string][]string{"tiktoken": {"bench-tiktoken", "o200k_base", "ordinary"}}},
		{"llama3", func() *Tokenizer { return loadHFFile(b, filepath.Join(dir, "llama3.json")) },
			map[string][]string{"hf": {"bench-hf", filepath.Join(dir, "llama3.json"), "no_special"}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			tok := c.load()
			refs := map[string]float64{}
			for name, args := range c.refs {
				refs[name] = refRate(b, dir, docs, args...)
			}
			// The piece cache off, then on: their tok/s side by side.
			for _, mode := range []string{"nocache", "cache"} {
				b.Run(mode, func(b *testing.B) {
					tok.noCache = mode == "nocache"
					defer func() { tok.noCache = false }()
					var ids []int32
					tokens := 0
					b.ResetTimer()
					c0 := cpuTime(b)
					for range b.N {
						tokens = 0
						for _, d := range docs {
							ids = tok.AppendIDs(ids[:0], d, false, 0)
							tokens += len(ids)
						}
					}
					rate := float64(tokens) * float64(b.N) / b.Elapsed().Seconds()
					b.StopTimer()
					b.ReportMetric(rate, "tok/s")
					b.ReportMetric(float64(tokens)*float64(b.N)/(cpuTime(b)-c0).Seconds(), "tok/cpu-s")
					for name, ref := range refs {
						b.ReportMetric(ref, name+"_tok/s")
						b.ReportMetric(rate/ref, "x_"+name)
					}
				})
			}
		})
	}
}

// BenchmarkLoadHF is LoadHF of Llama 3's tokenizer.json (9 MB, 280,147
// merges), which every replica building an lm-pretrain pipeline and every
// job submit checking one do; cpu-ms/op counts the GC's work too.
//
//	go test -run '^$' -bench BenchmarkLoadHF -cpu 1 ./functions/text/bpe/
func BenchmarkLoadHF(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(tokref(b), "llama3.json"))
	if err != nil {
		b.Skip(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	c0 := cpuTime(b)
	for b.Loop() {
		if _, err := LoadHF(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
}
