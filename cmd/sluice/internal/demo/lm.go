package demo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sluice-project/sluice/format/lines"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/synth"
)

// The lm dataset: synthetic JSONL text through a packing pipeline
// (lm-pretrain by default), its tokenizer.json synth's byte-level one in a
// vocab directory the demo's replicas read.

// writeVocab writes synth's byte tokenizer as tokenizer.json into a
// temporary directory, removed when the run ends.
func (p *parts) writeVocab() error {
	dir, err := os.MkdirTemp("", "sluice-demo-vocab-")
	if err != nil {
		return fmt.Errorf("vocab directory: %w", err)
	}
	p.onClose(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, pipeline.LMPretrainTokenizer), synth.ByteTokenizerJSON(), 0o644); err != nil {
		return fmt.Errorf("vocab directory: %w", err)
	}
	p.vocabDir = dir
	return nil
}

// expectedRows is what a packing pipeline makes of the shards in an
// epoch: its rows, plus the documents that fail (the summary counts those
// apart from what was delivered). ok is false when the pipeline does not
// pack: then a sample is a row.
func expectedRows(shards []synth.Shard, name, vocabDir string) (rows int64, ok bool, err error) {
	p, err := pipeline.Lookup(name, pipeline.Options{VocabDir: vocabDir})
	if err != nil {
		return 0, false, err
	}
	po, ok := pipeline.PackingOf(p)
	if !ok {
		return 0, false, nil
	}
	var ids []int32
	for _, sh := range shards {
		pk, err := pipeline.NewPacker(po, sh.Name)
		if err != nil {
			return 0, false, err
		}
		rd := lines.NewReader(bytes.NewReader(sh.Data), sh.Name, "jsonl", 0)
		for {
			s, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			var se *wds.SampleError
			if errors.As(err, &se) {
				rows++
				continue
			}
			if err != nil {
				return 0, false, err
			}
			out, err := p.Process(s, 0)
			if err == nil {
				ids, err = pipeline.AppendDocIDs(ids[:0], out)
			}
			if err != nil {
				rows++ // a failed document
				continue
			}
			pk.Add(ids)
			pk.Take()
		}
		pk.Close()
		rows += pk.Stats().Rows
	}
	return rows, true, nil
}
