package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/synth"
)

// byteTokenizerDir is a vocab directory holding synth's byte tokenizer as
// tokenizer.json: a text's ids are its bytes, EOS 256.
func byteTokenizerDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, pipeline.LMPretrainTokenizer), synth.ByteTokenizerJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const packedSpec = "ops:\n  - text\n  - {op: bpe, tokenizer: tokenizer.json, mode: ids}\n  - {op: pack, seq_len: 64}\n"

// packedRows reads the rows of a packed shard's chunks, in order: keys and
// the real tokens (attention_mask 1) of each.
func packedRows(t *testing.T, chunks [][]byte, seqLen int) (keys []string, tokens [][]int32) {
	t.Helper()
	for _, c := range chunks {
		f, ks := chunkKeys(t, c)
		ids, mask, cu := f.Tensors["input_ids"], f.Tensors["attention_mask"], f.Tensors["cu_seqlens"]
		if !slices.Equal(ids.Shape, []int{len(ks), seqLen}) || !slices.Equal(mask.Shape, ids.Shape) ||
			!slices.Equal(f.Tensors["position_ids"].Shape, ids.Shape) || !slices.Equal(cu.Shape, []int{len(ks), seqLen + 1}) ||
			!slices.Equal(f.Tensors["num_seqs"].Shape, []int{len(ks)}) {
			t.Fatalf("chunk of %d rows: shapes ids %v mask %v cu %v", len(ks), ids.Shape, mask.Shape, cu.Shape)
		}
		for r := range ks {
			var real []int32
			for i := range seqLen {
				if binary.LittleEndian.Uint32(mask.Data[4*(r*seqLen+i):]) == 1 {
					real = append(real, int32(binary.LittleEndian.Uint32(ids.Data[4*(r*seqLen+i):])))
				}
			}
			tokens = append(tokens, real)
		}
		keys = append(keys, ks...)
	}
	return keys, tokens
}

// splitDocs cuts a token stream at EOS into the documents' texts.
func splitDocs(t *testing.T, stream []int32) []string {
	t.Helper()
	docs, err := synth.ByteDocuments(stream)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// A packed JSONL shard: the documents' tokens, each followed by EOS, in
// rows of 64 keyed by the shard and row; the line that is not JSON fails
// by its key and is in no row; the last row is padded; and the shard sent
// again comes out byte for byte the same.
func TestPackedShard(t *testing.T) {
	e := setup(t, Config{VocabDir: byteTokenizerDir(t)})
	shards, err := synth.Text(synth.TextOptions{Samples: 40, Shards: 1, Seed: 3, Format: "jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	data := append(bytes.Clone(shards[0].Data), []byte("not json\n{\"text\": \"héllo wörld ✓\"}\n")...)
	putObject(t, e, "lm/part-03.jsonl", data)
	var want []string
	for line := range strings.Lines(string(data)) {
		var doc struct{ Text string }
		if json.Unmarshal([]byte(line), &doc) == nil {
			want = append(want, doc.Text)
		}
	}

	tk := task(0)
	tk.Key, tk.Pipeline = "lm/part-03.jsonl", packedSpec
	out := complete(t, post(t, e.url, taskEvent(t, tk)))
	if fk := failedKeys(out.end.Failed); !slices.Equal(fk, []string{"part-03/00000040"}) {
		t.Errorf("failed %v (%+v), want the line that is not JSON", fk, out.end.Failed)
	}
	keys, tokens := packedRows(t, out.chunks, 64)
	if out.end.Samples != len(keys) || len(keys) < 2 {
		t.Fatalf("end says %d samples, %d rows came", out.end.Samples, len(keys))
	}
	for i, k := range keys {
		if want := fmt.Sprintf("part-03/row%08d", i); k != want {
			t.Errorf("row %d key %q, want %q", i, k, want)
		}
		if i < len(keys)-1 && len(tokens[i]) != 64 {
			t.Errorf("row %d: %d tokens, want 64 (only the last row is padded)", i, len(tokens[i]))
		}
	}
	if got := splitDocs(t, slices.Concat(tokens...)); !slices.Equal(got, want) {
		t.Errorf("documents from the rows:\n%q\nwant\n%q", got, want)
	}

	again := complete(t, post(t, e.url, taskEvent(t, tk)))
	if !slices.EqualFunc(out.chunks, again.chunks, bytes.Equal) {
		t.Error("the shard sent again gave other chunks")
	}

	// tail: drop leaves out the partial last row, whose tokens are lost
	// on purpose: the rows that come are the same.
	tk.Pipeline = strings.Replace(packedSpec, "seq_len: 64", "seq_len: 64, tail: drop", 1)
	drop := complete(t, post(t, e.url, taskEvent(t, tk)))
	dkeys, dtokens := packedRows(t, drop.chunks, 64)
	if len(dkeys) != len(keys)-1 || !slices.EqualFunc(dtokens, tokens[:len(dkeys)], slices.Equal) {
		t.Errorf("tail drop: %d rows, want the %d full ones of tail pad", len(dkeys), len(keys)-1)
	}
}

// Rows that cannot fit the job's chunk cap refuse the task, before the
// shard is read, rather than fail every row.
func TestPackedRowOverTheChunkCap(t *testing.T) {
	e := setup(t, Config{VocabDir: byteTokenizerDir(t)})
	tk := task(0)
	tk.Key, tk.ChunkMaxBytes = "lm/none.jsonl", 64<<10
	tk.Pipeline = strings.Replace(packedSpec, "seq_len: 64", "seq_len: 8192", 1)
	expectStatus(t, post(t, e.url, taskEvent(t, tk)), http.StatusBadRequest,
		"pack seq_len 8192: a row is 132380 bytes as a chunk, over the job's chunk_max_bytes 65536")
	// With EOS 0, which the row's zeros end with, too.
	tk.Pipeline = strings.Replace(packedSpec, "seq_len: 64", "seq_len: 8192, eos_id: 0", 1)
	expectStatus(t, post(t, e.url, taskEvent(t, tk)), http.StatusBadRequest, "pack seq_len 8192: a row is 132380 bytes")
}
