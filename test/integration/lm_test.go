package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// The LM example's sizes. Rows of 128 tokens rather than lm-pretrain's
// 2,048: the example's model attends through a [B, heads, T, T] mask, and
// on two shared cores a step on rows of 2,048 takes tens of seconds; the
// job is lm-pretrain's spec otherwise. Every shard packs into exactly
// lmRowsPerShard rows, so that the sources' rows are in their weights'
// proportion (6 web shards, 2 code shards, 3:1).
const (
	lmSeqLen       = 128
	lmRowsPerShard = 16
	lmBatch        = 8
	lmEpochs       = 2
)

// lmPipeline is lm-pretrain with rows of lmSeqLen.
var lmPipeline = "name: lm-pretrain-" + strconv.Itoa(lmSeqLen) + "\nops:\n  - text\n" +
	"  - {op: bpe, tokenizer: tokenizer.json, mode: ids}\n" +
	"  - {op: pack, seq_len: " + strconv.Itoa(lmSeqLen) + ", tail: pad}\n"

// TestIntegrationLMPretrainMixed: the README's language-model example end
// to end. Two JSONL text datasets, "web" (synth's news-like passages, 6
// shards) and "code" (Go-like functions, 2 shards), mixed 3:1 in one job
// file whose pipeline tokenizes with the byte-level tokenizer.json that
// synth writes (in the replicas' --vocab-dir) and packs rows; the
// controller's replicas make the rows from versitygw, and
// clients/python/examples/lm_pretrain.py (torch, with Debian's python3)
// trains its tiny causal LM on them through a real `sluice agent` for 2
// epochs. The script exits 0, its loss falls, it reads every row of every
// epoch once, each window of 8 batches (64 rows) holds 48 +- 1 web rows,
// and `job status` counts each source's tasks and rows.
func TestIntegrationLMPretrainMixed(t *testing.T) {
	bins := binaries(t)
	py := pythonWithTorch(t)
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := StartCluster(t, bins, ClusterOptions{})
	vocab := filepath.Join(c.Dir, "vocab")
	if err := os.MkdirAll(vocab, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vocab, "tokenizer.json"), synth.ByteTokenizerJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(25, 5))
	web, code := lmShards(t, "web", 6, webDocs(t)), lmShards(t, "code", 2, func() string { return codeDoc(rng) })
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	for prefix, shards := range map[string][]synth.Shard{"web/": web, "code/": code} {
		if err := synth.Upload(ctx, c.S3.Client(t), "corpus", prefix, shards); err != nil {
			t.Fatalf("%v\n%s", err, c.S3.Tail(20))
		}
	}
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{VocabDir: vocab})

	spec := c.WriteSpec("lm", Spec{"id": "lm", "pipeline": lmPipeline, "batch_size": lmBatch, "epochs": lmEpochs, "seed": 7, "max_replicas": 2,
		"sources": []map[string]any{{"dataset": "s3://corpus/web/", "weight": 3}, {"dataset": "s3://corpus/code/", "weight": 1}}})
	c.MustSluice("job", "submit", "--vocab-dir", vocab, spec)
	agent := c.StartAgent("agent", "lm")

	start := time.Now()
	p := StartProcess(t, c.Dir, "lm_pretrain", py,
		[]string{filepath.Join(root, "clients", "python", "examples", "lm_pretrain.py"),
			"--url", agent.URL, "--vocab-size", "257", "--epochs", strconv.Itoa(lmEpochs)},
		[]string{"PYTHONPATH=" + filepath.Join(root, "clients", "python"), "PYTHONUNBUFFERED=1", "OMP_NUM_THREADS=1"})
	*c.procs = append(*c.procs, p)
	if err := p.Wait(jobTimeout); err != nil {
		t.Fatalf("%v\n%s", err, p.Tail(30))
	}
	if err := p.ExitErr(); err != nil {
		t.Fatalf("lm_pretrain.py: %v\n%s", err, p.Tail(30))
	}
	took := time.Since(start)
	waitReleased(t, c, js, "lm", wire.JobSucceeded, ctrl)

	steps, sum := parseLMLog(t, p.Log())
	perEpoch := (6 + 2) * lmRowsPerShard
	t.Logf("lm_pretrain.py: %d steps in %v, loss %.3f -> %.3f (means of the first and last 4 steps), %d rows (%d distinct), by source %v",
		sum.Steps, took.Round(time.Second), sum.LossFirst, sum.LossLast, sum.Rows, sum.DistinctRows, sum.RowsBySource)
	if want := lmEpochs * perEpoch / lmBatch; sum.Steps != want || len(steps) != want {
		t.Errorf("%d steps (%d logged), want %d", sum.Steps, len(steps), want)
	}
	if sum.LossLast > 0.75*sum.LossFirst {
		t.Errorf("loss %.3f -> %.3f: want it to fall by a quarter at least", sum.LossFirst, sum.LossLast)
	}
	// Every row once: each (epoch, source, key) distinct, as many as the
	// shards pack into.
	if sum.Rows != lmEpochs*perEpoch || sum.DistinctRows != sum.Rows {
		t.Errorf("%d rows read, %d distinct; want %d, each once", sum.Rows, sum.DistinctRows, lmEpochs*perEpoch)
	}
	if want := map[string]int{"0": lmEpochs * 6 * lmRowsPerShard, "1": lmEpochs * 2 * lmRowsPerShard}; fmt.Sprint(sum.RowsBySource) != fmt.Sprint(want) {
		t.Errorf("rows by source %v, want %v (3:1)", sum.RowsBySource, want)
	}
	// The mixture all through each epoch: every 8 consecutive batches (64
	// rows) hold 48 +- 1 web rows.
	for e := range lmEpochs {
		var web []int
		for _, s := range steps {
			if s.epoch == e {
				web = append(web, s.bySource[0])
			}
		}
		lo, hi := 64, 0
		for i := 0; i+64/lmBatch <= len(web); i++ {
			n := 0
			for _, w := range web[i : i+64/lmBatch] {
				n += w
			}
			lo, hi = min(lo, n), max(hi, n)
		}
		t.Logf("epoch %d: web rows per batch %v; every 8 batches (64 rows) hold %d..%d web rows (target 48 +- 1)", e, web, lo, hi)
		if len(web) != perEpoch/lmBatch || lo < 47 || hi > 49 {
			t.Errorf("epoch %d: %d batches, windows of 64 rows hold %d..%d web rows; want %d batches, 47..49", e, len(web), lo, hi, perEpoch/lmBatch)
		}
	}

	want := []wire.SourceProgress{
		{Dataset: "s3://corpus/web/", Tasks: 6 * lmEpochs, TasksDone: 6 * lmEpochs, SamplesProcessed: 6 * lmEpochs * lmRowsPerShard},
		{Dataset: "s3://corpus/code/", Tasks: 2 * lmEpochs, TasksDone: 2 * lmEpochs, SamplesProcessed: 2 * lmEpochs * lmRowsPerShard},
	}
	var st wire.JobStatus
	testenv.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		if st, err = JobStatus(ctx, js, "lm"); err != nil {
			return err
		}
		if fmt.Sprint(st.Sources) != fmt.Sprint(want) {
			return fmt.Errorf("job status sources %+v, want %+v", st.Sources, want)
		}
		return nil
	})
	t.Logf("sluice job status lm:\n%s", c.MustSluice("job", "status", "lm").Stdout)
}

// lmSummary is lm_pretrain.py's last line.
type lmSummary struct {
	Steps        int            `json:"steps"`
	LossFirst    float64        `json:"loss_first"`
	LossLast     float64        `json:"loss_last"`
	Rows         int            `json:"rows"`
	DistinctRows int            `json:"distinct_rows"`
	RowsBySource map[string]int `json:"rows_by_source"`
}

type lmStep struct {
	epoch, step int
	bySource    map[int]int
}

var lmStepLine = regexp.MustCompile(`^epoch (\d+) step (\d+): loss [0-9.]+, rows by source ((?:\d+:\d+ ?)+)$`)

// parseLMLog reads lm_pretrain.py's log: a line per step, with the rows of
// each source, and the JSON summary.
func parseLMLog(t *testing.T, log string) ([]lmStep, lmSummary) {
	t.Helper()
	var steps []lmStep
	var sum lmSummary
	found := false
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "{") {
			if err := json.Unmarshal([]byte(l), &sum); err != nil {
				t.Fatalf("summary %q: %v", l, err)
			}
			found = true
			continue
		}
		m := lmStepLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := lmStep{bySource: map[int]int{}}
		s.epoch, _ = strconv.Atoi(m[1])
		s.step, _ = strconv.Atoi(m[2])
		for _, f := range strings.Fields(m[3]) {
			src, n, _ := strings.Cut(f, ":")
			i, _ := strconv.Atoi(src)
			s.bySource[i], _ = strconv.Atoi(n)
		}
		steps = append(steps, s)
	}
	if !found {
		t.Fatalf("lm_pretrain.py printed no JSON summary:\n%s", log)
	}
	return steps, sum
}

// lmShards makes n JSONL shards, name-00.jsonl..., of documents from doc,
// each packing into exactly lmRowsPerShard rows of lmSeqLen with the byte
// tokenizer (a token a byte, EOS after each document): its documents'
// tokens fill more than all but half a row and at most every row, the
// last document cut to fit. Documents longer than a row span rows.
func lmShards(t *testing.T, name string, n int, doc func() string) []synth.Shard {
	t.Helper()
	full := lmRowsPerShard * lmSeqLen
	shards := make([]synth.Shard, n)
	for s := range shards {
		var b bytes.Buffer
		tokens := 0
		for tokens <= full-lmSeqLen/2 {
			txt := doc()
			if room := full - tokens - 1; len(txt) > room {
				txt = txt[:room] // ASCII: a byte a character
			}
			line, err := json.Marshal(map[string]string{"text": txt})
			if err != nil {
				t.Fatal(err)
			}
			b.Write(line)
			b.WriteByte('\n')
			tokens += len(txt) + 1
			shards[s].Samples++
		}
		shards[s].Name = fmt.Sprintf("%s-%02d.jsonl", name, s)
		shards[s].Data = b.Bytes()
	}
	return shards
}

// webDocs returns synth's news-like passages one after another.
func webDocs(t *testing.T) func() string {
	t.Helper()
	shards, err := synth.Text(synth.TextOptions{Samples: 2000, Shards: 1, Seed: 25, Format: "jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(shards[0].Data)), "\n")
	i := 0
	return func() string {
		var d struct{ Text string }
		if err := json.Unmarshal([]byte(lines[i%len(lines)]), &d); err != nil {
			t.Fatal(err)
		}
		i++
		return d.Text
	}
}

// codeDoc is a small Go-like function: text of another kind than web's.
func codeDoc(rng *rand.Rand) string {
	names := []string{"sum", "scale", "clamp", "next", "step", "mix", "hash", "count"}
	vars := []string{"x", "n", "i", "v", "acc"}
	fn, v := names[rng.IntN(len(names))], vars[rng.IntN(len(vars))]
	var b strings.Builder
	fmt.Fprintf(&b, "func %s%d(%s int) int {\n", fn, rng.IntN(100), v)
	for range 1 + rng.IntN(3) {
		fmt.Fprintf(&b, "\tif %s > %d {\n\t\t%s = %s * %d\n\t}\n", v, rng.IntN(1000), v, v, 2+rng.IntN(7))
	}
	fmt.Fprintf(&b, "\treturn %s + %d\n}\n", v, rng.IntN(10))
	return b.String()
}
