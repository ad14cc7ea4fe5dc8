package pipeline

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/functions/text/bpe"
)

// The pack op ends a causal LM pipeline: per sample it passes the
// document's ids on (Process gives them as "ids"), and the shard's
// documents are packed into rows by a Packer with its options (PackingOf).

// eosSpellings are the end-of-text tokens pack separates documents with
// when eos_id is left out and the post-processor adds no EOS: GPT-2's,
// Qwen2's and tiktoken's, Llama 3's, then SentencePiece-style ones.
var eosSpellings = []string{"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}

func packOp() OpSpec {
	return OpSpec{
		Name: "pack",
		Doc:  `packs a shard's documents, EOS after each, into rows: "input_ids", "position_ids", "attention_mask" I32 [seq_len], "cu_seqlens" I32 [seq_len+1], "num_seqs" I32 []`,
		Params: []Param{
			{Name: "seq_len", Type: ParamInt, Default: 2048, Bounded: true, Min: 2, Max: MaxSeqLen,
				Doc: "tokens in a row; a document longer than what is left of a row continues in the next"},
			{Name: "tail", Type: ParamString, Default: TailPad, Values: []string{TailPad, TailDrop},
				Doc: "the shard's last, partial row: pad it (attention_mask 0 on the padding) or drop it"},
			{Name: "eos_id", Type: ParamInt, Default: -1, Bounded: true, Min: -1, Max: bpe.MaxVocab - 1,
				Doc: "the id after each document; -1: the tokenizer's (the post-processor's EOS, else its " + strings.Join(eosSpellings, ", ") + ")"},
			{Name: "pad_id", Type: ParamInt, Default: -1, Bounded: true, Min: -1, Max: bpe.MaxVocab - 1,
				Doc: "the id of padding; -1: eos_id"},
		},
		In: []Type{TypeIDs}, Out: TypePacked,
		build: buildPack,
	}
}

type packStage struct{ o PackOptions }

func buildPack(p Params, o Options) (stage, error) {
	s := &packStage{o: PackOptions{SeqLen: p.Int("seq_len"), Tail: p.String("tail"),
		EOS: int32(p.Int("eos_id")), PadID: int32(p.Int("pad_id"))}}
	if o.check || !o.prevBuilt {
		return s, nil // the ids' tokenizer is not at hand (job submit), or the op before failed
	}
	b, _ := o.prev.(*bpeStage)
	if b == nil || b.tok == nil {
		return nil, fmt.Errorf("pack: put bpe with mode: ids before it")
	}
	if s.o.EOS < 0 {
		eos, ok := defaultEOS(b)
		if !ok {
			return nil, fmt.Errorf("eos_id: the tokenizer's post-processor adds no EOS and it has none of %s: set eos_id", strings.Join(eosSpellings, ", "))
		}
		s.o.EOS = eos
	}
	if s.o.PadID < 0 {
		s.o.PadID = s.o.EOS
	}
	for _, c := range []struct {
		name string
		id   int32
	}{{"eos_id", s.o.EOS}, {"pad_id", s.o.PadID}} {
		if int(c.id) >= b.tok.VocabSize() {
			return nil, fmt.Errorf("%s %d: the tokenizer's ids are 0..%d", c.name, c.id, b.tok.VocabSize()-1)
		}
	}
	return s, nil
}

func defaultEOS(b *bpeStage) (int32, bool) {
	if _, eos := b.tok.Template(); len(eos) > 0 {
		return eos[len(eos)-1], true
	}
	for _, s := range eosSpellings {
		if id, ok := b.tok.AddedID(s); ok {
			return id, true
		}
	}
	return 0, false
}

func (s *packStage) apply(st *state) error {
	b := make([]byte, 4*len(st.ids))
	for i, id := range st.ids {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(id))
	}
	st.fields = append(st.fields, Field{Name: FieldDocIDs, DType: safetensors.I32, Shape: []int{len(st.ids)}, Data: b})
	return nil
}
