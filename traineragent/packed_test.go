package traineragent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/functions/server"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// The test links a real function replica (functions/server) into the
// agent's tests, and only its tests: the agent itself links no
// preprocessing code (jobspec's TestNoPipelineCodeBelowTheCommands).

// packedSpec packs JSONL documents tokenized by synth's byte tokenizer
// (a document's ids are its bytes; EOS 256) into rows of 128.
const packedSpec = "ops:\n  - text\n  - {op: bpe, tokenizer: tokenizer.json, mode: ids}\n  - {op: pack, seq_len: 128}\n"

// TestTeamResumesAPackedJobExactlyOnce: a causal LM job, its shards'
// documents packed into rows by a real replica, read by a 2 x 2 team for
// some steps, then resumed from the last step's position by a 3 x 1 team
// to the end. Every row of every epoch reaches one rank once, and the
// documents read back from the rows delivered are every document of the
// dataset, each once, whole, in shard order: no token lost or repeated.
func TestTeamResumesAPackedJobExactlyOnce(t *testing.T) {
	e := newEnv(t)
	const bucket = "lmdata"
	s3c, _ := testenv.S3(t, bucket)
	shards, err := synth.Text(synth.TextOptions{Samples: 60, Shards: 4, Seed: 5, Format: "jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(context.Background(), s3c, bucket, "lm/", shards); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), synth.ByteTokenizerJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{VocabDir: dir}, s3c, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	job := wire.Job{
		Spec: wire.JobSpec{ID: "packed", Dataset: "s3://lmdata/lm/", Pipeline: packedSpec, BatchSize: 4, Epochs: 2,
			ChunkMaxBytes: 64 << 10}, // a few rows a chunk, so a step spans chunks and shards
		Bucket: bucket,
	}
	for _, s := range shards {
		job.Shards = append(job.Shards, "lm/"+s.Name)
	}
	e.submitTo(t, job, hs.URL, 2)

	oldRanks := [][]int{{0, 1}, {2, 3}}
	oldCtx, stopOld := context.WithCancel(context.Background())
	defer stopOld()
	var oldRuns sync.WaitGroup
	var old []*Agent
	for i, rs := range oldRanks {
		a, err := New(e.nc, e.js, keyed(job), teamOptions(fmt.Sprintf("old%d", i), 4, rs), nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, a)
		oldRuns.Go(func() { _ = a.Run(oldCtx) })
	}
	kept := takeTeamParts(t, old, oldRanks, 4, 5)
	last := kept[0][len(kept[0])-1]
	stopOld()
	oldRuns.Wait()
	state := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader,
		Epoch: last.Epoch, Step: last.Step + 1, WorldSize: 4, Position: last.Position}

	ranks, agents, waits, err := resumeThreeByOne(t, e, job, state)
	if err != nil {
		t.Fatalf("resuming 3 x 1: %v", err)
	}
	rest := takeTeamParts(t, agents, ranks, 3, -1)
	checkSteps(t, rest, 4, [2]int{last.Epoch, last.Step + 1})
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}

	// Rows by epoch, shard and index, each once.
	type rowRef struct {
		epoch int
		shard string
		index int
	}
	rows := map[rowRef][]int32{}
	for _, parts := range slices.Concat(kept, rest) {
		for _, p := range parts {
			for i, k := range p.Keys {
				var ref rowRef
				ref.epoch = p.Epoch
				cut := strings.LastIndex(k, "/row")
				if cut < 0 {
					t.Fatalf("row key %q: want SHARD/rowN", k)
				}
				ref.shard = k[:cut]
				if _, err := fmt.Sscanf(k[cut:], "/row%08d", &ref.index); err != nil {
					t.Fatalf("row key %q: %v", k, err)
				}
				if _, dup := rows[ref]; dup {
					t.Fatalf("epoch %d row %s delivered twice", p.Epoch, k)
				}
				rows[ref] = realTokens(t, &p.Batch, i, 128)
			}
		}
	}
	t.Logf("%d rows over %d epochs; the 2 x 2 team took %d steps, the 3 x 1 team %d", len(rows), job.Spec.Epochs, len(kept[0]), len(rest[0]))
	if last.Epoch != 0 || last.Last {
		t.Fatalf("the 2 x 2 team's last step was epoch %d step %d (last %t): want a resume inside epoch 0", last.Epoch, last.Step, last.Last)
	}
	for epoch := range job.Spec.Epochs {
		for _, s := range shards {
			name := strings.TrimSuffix(s.Name, ".jsonl")
			var stream []int32
			for i := 0; ; i++ {
				toks, ok := rows[rowRef{epoch, name, i}]
				if !ok {
					break
				}
				stream = append(stream, toks...)
				delete(rows, rowRef{epoch, name, i})
			}
			var want []string
			for line := range strings.Lines(string(s.Data)) {
				var doc struct{ Text string }
				if err := json.Unmarshal([]byte(line), &doc); err != nil {
					t.Fatal(err)
				}
				want = append(want, doc.Text)
			}
			if got := documents(t, stream); !slices.Equal(got, want) {
				t.Errorf("epoch %d shard %s: %d documents read back from the rows, want %d:\n%q\nwant\n%q", epoch, name, len(got), len(want), got, want)
			}
		}
	}
	if len(rows) > 0 {
		t.Errorf("%d rows delivered after a gap in their shard's rows", len(rows))
	}
}

// realTokens is row i of a batch of packed rows: its tokens where
// attention_mask is 1.
func realTokens(t *testing.T, b *Batch, i, seqLen int) []int32 {
	t.Helper()
	b.Materialize()
	var ids, mask []byte
	for _, tn := range b.Tensors {
		switch tn.Name {
		case "input_ids":
			ids = tn.Data
		case "attention_mask":
			mask = tn.Data
		}
	}
	if len(ids) != 4*seqLen*len(b.Keys) || len(mask) != len(ids) {
		t.Fatalf("batch of %d rows: %d bytes of input_ids, %d of attention_mask", len(b.Keys), len(ids), len(mask))
	}
	var out []int32
	for j := range seqLen {
		at := 4 * (i*seqLen + j)
		if binary.LittleEndian.Uint32(mask[at:]) == 1 {
			out = append(out, int32(binary.LittleEndian.Uint32(ids[at:])))
		}
	}
	return out
}

// documents cuts a stream of byte tokens at EOS into texts.
func documents(t *testing.T, stream []int32) []string {
	t.Helper()
	docs, err := synth.ByteDocuments(stream)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}
