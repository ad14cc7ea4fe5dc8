package pipeline

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/functions/text"
	"github.com/sluice-project/sluice/internal/jsonscan"
)

// Text ops: a sample's text (a tar shard's txt member, or a field of a
// JSON Lines line or json member), then BERT WordPiece ids padded (or
// packed) to a fixed length, as int32.

func textOps() []OpSpec {
	return []OpSpec{
		{
			Name: "text",
			Doc:  "reads a sample's text: the txt member, or a field of its JSON object (a jsonl line or json member); a JSON list of strings gives segments",
			Params: []Param{
				{Name: "source", Type: ParamString, Default: "auto", Values: []string{"auto", "txt", "jsonl", "json"},
					Doc: "where the text is: the txt member, a field of the jsonl or json member; auto takes txt if the sample has one, else the JSON field"},
				{Name: "field", Type: ParamString, Default: "text", Check: nonEmpty, Doc: "the JSON field holding the text"},
			},
			In: []Type{TypeSample}, Out: TypeText,
			build: func(p Params, _ Options) (stage, error) {
				return &textOp{source: p.String("source"), field: p.String("field")}, nil
			},
		},
		{
			Name: "wordpiece",
			Doc:  `BERT WordPiece tokenization to "input_ids" and "attention_mask" I32 [max_len] (+ "segment_ids" when packing)`,
			Params: []Param{
				{Name: "vocab", Type: ParamString, Default: builtinVocab, Check: nonEmpty,
					Doc: "builtin for the embedded English vocab, or a vocab file (one token per line) named within the replica's --vocab-dir, read when the pipeline is built, on every replica"},
				{Name: "lowercase", Type: ParamBool, Default: true, Doc: "lowercase before splitting into pieces (uncased models)"},
				{Name: "strip_accents", Type: ParamBool, Default: true, Doc: "drop combining accents (uncased models)"},
				{Name: "max_len", Type: ParamInt, Default: 128, Bounded: true, Min: 2, Max: 65536,
					Doc: "length of every row, [CLS] and [SEP] included"},
				{Name: "mode", Type: ParamString, Default: "pad", Values: []string{"pad", "pack"},
					Doc: "pad: [CLS] text [SEP], cut and padded; pack: the text's segments (lines, or a JSON list) as [CLS] s1 [SEP] s2 [SEP]..., cut and padded"},
				{Name: "max_chars_per_word", Type: ParamInt, Default: text.DefaultMaxCharsPerWord, Bounded: true, Min: 1, Max: 10000,
					Doc: "a longer word becomes [UNK]"},
			},
			In: []Type{TypeText}, Out: TypeTokens,
			build: buildWordPiece,
		},
		bpeOp(),
		packOp(),
	}
}

func textBuiltins() []Definition {
	return []Definition{{
		Name: "text-wordpiece",
		Doc:  `txt member (or JSON "text" field), builtin vocab, lowercased, padded to 128: "input_ids", "attention_mask" I32 [128]`,
		Ops: []OpCall{
			{Op: "text"},
			{Op: "wordpiece", Params: map[string]any{"vocab": "builtin", "lowercase": true, "max_len": 128, "mode": "pad"}},
		},
	}, {
		Name: LMPretrain,
		Doc:  `JSON "text" field (or txt member), byte-level BPE from tokenizer.json in the replica's --vocab-dir, packed into rows of 2048: "input_ids", "position_ids", "attention_mask" I32 [2048], "cu_seqlens" I32 [2049], "num_seqs" I32 []`,
		Ops: []OpCall{
			{Op: "text"},
			{Op: "bpe", Params: map[string]any{"tokenizer": LMPretrainTokenizer, "mode": "ids"}},
			{Op: "pack", Params: map[string]any{"seq_len": 2048, "tail": TailPad}},
		},
	}}
}

// The built-in causal LM pipeline, and the file it reads its tokenizer
// from: a builtin cannot carry a tokenizer (Llama 3's is 9 MB), so each
// replica's operator puts the model's tokenizer.json in --vocab-dir.
const (
	LMPretrain          = "lm-pretrain"
	LMPretrainTokenizer = "tokenizer.json"
)

func nonEmpty(v any) error {
	if v.(string) == "" {
		return fmt.Errorf("want a non-empty string")
	}
	return nil
}

type textOp struct{ source, field string }

func (o *textOp) apply(st *state) error {
	var members []string // the JSON members to read, in order
	switch o.source {
	case "auto":
		if _, ok := st.sample.Files["txt"]; !ok {
			members = jsonMembers
			if !hasAny(st, jsonMembers) {
				return fmt.Errorf("no text member (want txt, or a %s field in jsonl or json; sample has %s)", o.field, describeMembers(st.sample))
			}
		}
	case "jsonl", "json":
		members = []string{o.source}
	}
	if members == nil {
		b, ok := st.sample.Files["txt"]
		if !ok {
			return fmt.Errorf("no txt member (sample has %s)", describeMembers(st.sample))
		}
		st.text = string(b)
		return nil
	}
	// The usual line, a string field: one pass, no map (jsonfield.go).
	if raw, _, found, ok := st.jsonField(members, o.field); ok && found && raw[0] == '"' {
		st.text = jsonscan.Unquote(raw[1 : len(raw)-1])
		return nil
	}
	return o.fromObject(st, members)
}

// fromObject reads the field from jsonObject's map: what apply does with
// a line jsonField leaves to it (and any line, in the tests).
func (o *textOp) fromObject(st *state, members []string) error {
	obj, member, err := st.jsonObject(members...)
	if err != nil {
		return err
	}
	raw, ok := obj[o.field]
	if !ok {
		return fmt.Errorf("member %s has no field %q (it has %s)", member, o.field, strings.Join(slices.Sorted(maps.Keys(obj)), ", "))
	}
	if err := json.Unmarshal(raw, &st.text); err == nil {
		return nil
	}
	var segs []string
	if err := json.Unmarshal(raw, &segs); err != nil {
		return fmt.Errorf("member %s field %s %s: want a string or a list of strings", member, o.field, clip(string(raw), 32))
	}
	st.segments = append(st.segments[:0], segs...)
	return nil
}

type wordPiece struct {
	tok    *text.Tokenizer
	maxLen int
	pack   bool
}

func buildWordPiece(p Params, o Options) (stage, error) {
	v, err := loadVocab(p.String("vocab"), o)
	if err != nil {
		return nil, err
	}
	if v == nil { // checked only (Check): never run
		return &wordPiece{}, nil
	}
	tok, err := text.NewTokenizer(v, text.WordPieceOptions{
		Lowercase:       p.Bool("lowercase"),
		StripAccents:    p.Bool("strip_accents"),
		MaxCharsPerWord: p.Int("max_chars_per_word"),
	})
	if err != nil {
		return nil, err
	}
	return &wordPiece{tok: tok, maxLen: p.Int("max_len"), pack: p.String("mode") == "pack"}, nil
}

func (o *wordPiece) apply(st *state) error {
	shape := []int{o.maxLen}
	if !o.pack {
		txt := st.text
		if len(st.segments) > 0 {
			txt = strings.Join(st.segments, " ")
		}
		ids, mask := o.tok.Encode(txt, o.maxLen)
		st.fields = append(st.fields,
			Field{Name: "input_ids", DType: safetensors.I32, Shape: shape, Data: int32Bytes(ids)},
			Field{Name: "attention_mask", DType: safetensors.I32, Shape: shape, Data: int32Bytes(mask)})
		return nil
	}
	segs := st.segments
	if len(segs) == 0 {
		// Segments of a plain text are its non-blank lines.
		for line := range strings.Lines(st.text) {
			if line = strings.TrimSpace(line); line != "" {
				segs = append(segs, line)
			}
		}
	}
	ids, mask, segIDs, _ := o.tok.Pack(segs, o.maxLen)
	st.fields = append(st.fields,
		Field{Name: "input_ids", DType: safetensors.I32, Shape: shape, Data: int32Bytes(ids)},
		Field{Name: "attention_mask", DType: safetensors.I32, Shape: shape, Data: int32Bytes(mask)},
		Field{Name: "segment_ids", DType: safetensors.I32, Shape: shape, Data: int32Bytes(segIDs)})
	return nil
}

func int32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func hasAny(st *state, members []string) bool {
	for _, m := range members {
		if _, ok := st.sample.Files[m]; ok {
			return true
		}
	}
	return false
}
