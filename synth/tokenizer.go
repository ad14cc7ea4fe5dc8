package synth

import (
	"encoding/json"
	"fmt"
)

// ByteTokenizerEOS is the id of <|endoftext|> in ByteTokenizerJSON.
const ByteTokenizerEOS = 256

// ByteTokenizerJSON is a Hugging Face tokenizer.json of a byte-level BPE
// with no merges: every byte is its own token, its id the byte's value
// (spelt as GPT-2's bytes_to_unicode spells it), and <|endoftext|> is 256.
// Text tokenizes to its UTF-8 bytes, so a test can read documents back
// from the ids; and a demo needs no downloaded vocabulary.
func ByteTokenizerJSON() []byte {
	vocab := map[string]int{}
	n := 0
	for b := range 256 {
		r := rune(b)
		if !((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	doc := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "normalizer": nil, "post_processor": nil,
		"added_tokens": []any{map[string]any{"id": ByteTokenizerEOS, "content": "<|endoftext|>", "special": true,
			"single_word": false, "lstrip": false, "rstrip": false, "normalized": false}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err) // maps of strings and numbers always encode
	}
	return b
}

// ByteDocuments cuts a stream of ByteTokenizerJSON's ids at EOS into the
// documents' texts: what a test reads back from packed rows.
func ByteDocuments(stream []int32) ([]string, error) {
	var docs []string
	var cur []byte
	for _, id := range stream {
		switch {
		case id == ByteTokenizerEOS:
			docs, cur = append(docs, string(cur)), nil
		case id >= 0 && id < 256:
			cur = append(cur, byte(id))
		default:
			return nil, fmt.Errorf("id %d: not a byte or EOS", id)
		}
	}
	if len(cur) > 0 {
		return nil, fmt.Errorf("the stream ends inside a document without EOS: %q", cur)
	}
	return docs, nil
}
