package pipeline

import (
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/functions/text/bpe"
	"github.com/sluice-project/sluice/internal/bytesize"
)

// The bpe op: byte-level BPE (GPT-2, Llama 3, Qwen2, tiktoken's cl100k_base
// and o200k_base) from a tokenizer.json or a .tiktoken rank file named
// within the replica's vocab directory, like a wordpiece vocab.

// MaxTokenizerBytes caps a tokenizer file (Llama 3's tokenizer.json is 9 MB).
const MaxTokenizerBytes = bpe.MaxFileBytes

func bpeOp() OpSpec {
	return OpSpec{
		Name: "bpe",
		Doc:  `byte-level BPE (a tokenizer.json, or a .tiktoken rank file) to "input_ids" and "attention_mask" I32 [max_len]`,
		Params: []Param{
			{Name: "tokenizer", Type: ParamString, Default: "", Required: true,
				Doc: "a Hugging Face tokenizer.json (*.json) or a tiktoken rank file (*.tiktoken) named within the replica's --vocab-dir, read when the pipeline is built, on every replica"},
			{Name: "encoding", Type: ParamString, Default: "auto", Values: append([]string{"auto"}, bpe.EncodingNames()...),
				Doc: "for a .tiktoken file, its split pattern and special tokens; auto takes them from the file name (cl100k_base.tiktoken)"},
			{Name: "max_len", Type: ParamInt, Default: 1024, Bounded: true, Min: 1, Max: 1 << 20,
				Doc: "length of every row, the post-processor's BOS/EOS included"},
			{Name: "mode", Type: ParamString, Default: "pad", Values: []string{"pad", "ids"},
				Doc: "pad: BOS text EOS, the text cut so that EOS still fits, then pad_id; ids: BOS text EOS uncut and unpadded (max_len unused), for pack"},
			{Name: "add_special", Type: ParamBool, Default: true,
				Doc: "add what the tokenizer.json's post-processor adds (Llama 3's <|begin_of_text|>), as add_special_tokens=True"},
			{Name: "special_tokens", Type: ParamString, Default: "match", Values: []string{"match", "text"},
				Doc: "match: added and special tokens in the text are their ids (as tokenizers does; tiktoken's allowed_special=all); text: they are text (tiktoken's encode_ordinary)"},
			{Name: "pad_id", Type: ParamInt, Default: 0, Bounded: true, Min: 0, Max: bpe.MaxVocab - 1,
				Doc: "the id of padding (its attention_mask is 0)"},
			{Name: "max_text_bytes", Type: ParamInt, Default: 4 << 20, Bounded: true, Min: 1, Max: 64 << 20,
				Doc: "a sample with a longer text fails"},
		},
		In: []Type{TypeText}, Out: TypeTokens,
		OutFor: func(p Params) Type {
			if p.String("mode") == "ids" {
				return TypeIDs
			}
			return TypeTokens
		},
		build: buildBPE,
	}
}

type bpeStage struct {
	tok          *bpe.Tokenizer
	maxLen       int
	bos, eos     []int32
	matchSpecial bool
	padID        int32
	maxText      int
	idsMode      bool      // mode ids: the document's ids into the state
	ids          sync.Pool // *[]int32: a call's token buffer
}

func buildBPE(p Params, o Options) (stage, error) {
	name := p.String("tokenizer")
	if name == "" {
		return nil, fmt.Errorf("tokenizer: name a tokenizer.json or a .tiktoken file within the replica's vocab directory (--vocab-dir)")
	}
	if !filepath.IsLocal(name) {
		return nil, fmt.Errorf("tokenizer %q: want a file name within the replica's vocab directory (--vocab-dir), such as llama3-tokenizer.json", name)
	}
	encoding := p.String("encoding")
	switch ext := filepath.Ext(name); ext {
	case ".json":
		if encoding != "auto" {
			return nil, fmt.Errorf("encoding %s: only for a .tiktoken file (a tokenizer.json says its own)", encoding)
		}
		encoding = ""
	case ".tiktoken":
		if encoding == "auto" {
			encoding = strings.TrimSuffix(filepath.Base(name), ext)
			if _, ok := bpe.Encodings[encoding]; !ok {
				return nil, fmt.Errorf("tokenizer %q: set encoding (one of %s): the file name does not say it", name, strings.Join(bpe.EncodingNames(), ", "))
			}
		}
	default:
		return nil, fmt.Errorf("tokenizer %q: want a tokenizer.json (*.json) or a tiktoken rank file (*.tiktoken)", name)
	}
	if o.check {
		return &bpeStage{}, nil
	}
	tok, err := o.Tokenizers.load(name, encoding, o)
	if err != nil {
		return nil, err
	}
	s := &bpeStage{
		tok:          tok,
		maxLen:       p.Int("max_len"),
		matchSpecial: p.String("special_tokens") == "match",
		padID:        int32(p.Int("pad_id")),
		maxText:      p.Int("max_text_bytes"),
		idsMode:      p.String("mode") == "ids",
	}
	if p.Bool("add_special") {
		s.bos, s.eos = tok.Template()
	}
	if n := len(s.bos) + len(s.eos); s.maxLen <= n {
		return nil, fmt.Errorf("max_len %d: the post-processor adds %d tokens around the text; want more than that (or add_special: false)", s.maxLen, n)
	}
	return s, nil
}

func (s *bpeStage) apply(st *state) error {
	txt := st.text
	if len(st.segments) > 0 {
		txt = strings.Join(st.segments, " ")
	}
	if len(txt) > s.maxText {
		return fmt.Errorf("text of %s, over the op's max_text_bytes (%s)", bytesize.Format(int64(len(txt))), bytesize.Format(int64(s.maxText)))
	}
	if s.idsMode {
		st.ids = append(st.ids[:0], s.bos...)
		st.ids = s.tok.AppendIDs(st.ids, txt, s.matchSpecial, 0)
		st.ids = append(st.ids, s.eos...)
		return nil
	}
	room := s.maxLen - len(s.bos) - len(s.eos)
	buf, _ := s.ids.Get().(*[]int32)
	if buf == nil {
		buf = new([]int32)
	}
	defer s.ids.Put(buf)
	toks := s.tok.AppendIDs((*buf)[:0], txt, s.matchSpecial, room)
	*buf = toks
	toks = toks[:min(len(toks), room)]
	// The row straight into the output's bytes: BOS, the ids, EOS, padding.
	ids, mask := make([]byte, 4*s.maxLen), make([]byte, 4*s.maxLen)
	n := 0
	put := func(id int32) {
		binary.LittleEndian.PutUint32(ids[4*n:], uint32(id))
		binary.LittleEndian.PutUint32(mask[4*n:], 1)
		n++
	}
	for _, part := range [3][]int32{s.bos, toks, s.eos} {
		for _, id := range part {
			put(id)
		}
	}
	for ; n < s.maxLen; n++ {
		binary.LittleEndian.PutUint32(ids[4*n:], uint32(s.padID))
	}
	shape := []int{s.maxLen}
	st.fields = append(st.fields,
		Field{Name: "input_ids", DType: safetensors.I32, Shape: shape, Data: ids},
		Field{Name: "attention_mask", DType: safetensors.I32, Shape: shape, Data: mask})
	return nil
}

// TokenizerCache shares the BPE tokenizers a replica's pipelines load: a
// job's spec may come in many spellings (each a pipeline of its own), and
// Llama 3's tokenizer takes tens of megabytes, so each file is loaded once
// while it is unchanged. Safe for concurrent use; a nil cache loads afresh
// every time.
type TokenizerCache struct {
	mu sync.Mutex
	m  map[tokenizerKey]*bpe.Tokenizer
}

type tokenizerKey struct {
	name, encoding string
	size           int64
	mtime          time.Time
}

// maxCachedTokenizers bounds the cache; a replica serves few tokenizers.
const maxCachedTokenizers = 8

// NewTokenizerCache returns an empty cache.
func NewTokenizerCache() *TokenizerCache { return &TokenizerCache{} }

func (c *TokenizerCache) load(name, encoding string, o Options) (*bpe.Tokenizer, error) {
	f, err := openVocabFile("tokenizer", name, o, MaxTokenizerBytes)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tokenizer %q: %w", name, err)
	}
	key := tokenizerKey{name: name, encoding: encoding, size: info.Size(), mtime: info.ModTime()}
	if c != nil {
		c.mu.Lock()
		defer c.mu.Unlock() // one load at a time: the second waits and shares it
		if t, ok := c.m[key]; ok {
			return t, nil
		}
	}
	r := io.LimitReader(f, MaxTokenizerBytes+1)
	var tok *bpe.Tokenizer
	if encoding == "" {
		tok, err = bpe.LoadHF(r)
	} else {
		tok, err = bpe.LoadTiktoken(r, encoding)
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer %q: %w", name, err)
	}
	if c != nil {
		if c.m == nil || len(c.m) >= maxCachedTokenizers {
			c.m = map[tokenizerKey]*bpe.Tokenizer{}
		}
		c.m[key] = tok
	}
	return tok, nil
}
