package bpe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"
)

// byteToRune is GPT-2's bytes_to_unicode: the printable bytes stand for
// themselves, the others for U+0100 upward in order, so that a vocab
// spells every byte string with printable characters ("Ġ" is a space).
// runeToByte is the inverse, -1 where a rune stands for no byte.
var byteToRune, runeToByte = byteMaps()

func byteMaps() (b2r [256]rune, r2b [256 + 68]int16) {
	for i := range r2b {
		r2b[i] = -1
	}
	n := rune(0)
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = int16(b)
	}
	return b2r, r2b
}

// appendUnmapped appends the bytes a vocab string stands for to dst; ok is
// false if it has a character outside the byte map (a token no byte-level
// input can reach).
func appendUnmapped(dst []byte, s string) ([]byte, bool) {
	for _, r := range s {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return dst, false
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst, true
}

type hfFile struct {
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []hfAdded       `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         hfModel         `json:"model"`
}

type hfAdded struct {
	ID         int64  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"` // absent: !special, as tokenizers' AddedToken::from
	Special    bool   `json:"special"`
}

type hfModel struct {
	Type                    string   `json:"type"`
	Dropout                 *float64 `json:"dropout"`
	UnkToken                *string  `json:"unk_token"`
	ContinuingSubwordPrefix *string  `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string  `json:"end_of_word_suffix"`
	ByteFallback            bool     `json:"byte_fallback"`
	IgnoreMerges            bool     `json:"ignore_merges"`
	// Read by scanVocab and scanMerges (hfscan.go), and here null unless
	// cutVocabAndMerges left them in.
	Vocab  json.RawMessage `json:"vocab"`
	Merges json.RawMessage `json:"merges"`
}

// component is any tokenizer.json component: its type and the rest.
type component struct {
	Type string `json:"type"`
	// Normalizer and pre-tokenizer sequences.
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	// ByteLevel.
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// Split.
	Pattern  map[string]string `json:"pattern"`
	Behavior string            `json:"behavior"`
	Invert   bool              `json:"invert"`
	// TemplateProcessing.
	Single        []map[string]json.RawMessage `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int64 `json:"ids"`
	} `json:"special_tokens"`
}

func isNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || string(m) == "null"
}

// LoadHF reads a Hugging Face tokenizer.json of a byte-level BPE model: a
// BPE model; a ByteLevel pre-tokenizer, alone or after a Split by a known
// pattern; no normalizer or NFC; a ByteLevel or TemplateProcessing
// post-processor (or a Sequence of them). Anything else is refused, naming
// the component, and so is a file over MaxFileBytes or a vocab over the
// bounds.
func LoadHF(r io.Reader) (*Tokenizer, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("over the %d MiB limit", MaxFileBytes>>20)
	}
	// The vocab and merges (hfscan.go) cut out, encoding/json reads the rest.
	text := string(data)
	rest, vocab, merges, cut := cutVocabAndMerges(text)
	if !cut {
		rest = data
	}
	var f hfFile
	if err := json.Unmarshal(rest, &f); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %w", err)
	}
	if !cut {
		vocab, merges = string(f.Model.Vocab), string(f.Model.Merges)
	}
	t := &Tokenizer{}
	if !isNull(f.Truncation) {
		return nil, fmt.Errorf("truncation is not supported (the op's max_len cuts rows): set it to null")
	}
	if !isNull(f.Padding) {
		return nil, fmt.Errorf("padding is not supported (the op pads rows): set it to null")
	}
	if t.nfc, err = hfNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.hfPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.hfModel(&f.Model, vocab, merges); err != nil {
		return nil, err
	}
	if err := t.hfAddedTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	if err := t.hfPostProcessor(f.PostProcessor, 0); err != nil {
		return nil, err
	}
	return t, nil
}

func hfNormalizer(raw json.RawMessage) (nfc bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for _, n := range c.Normalizers {
			if _, err := hfNormalizer(n); err != nil {
				return false, err
			}
		}
		return len(c.Normalizers) > 0, nil
	}
	return false, fmt.Errorf("normalizer %s is not supported (supported: NFC, or none)", c.Type)
}

func (t *Tokenizer) hfPreTokenizer(raw json.RawMessage) error {
	const supported = "(supported: ByteLevel, or a Sequence of a Split by a known pattern and ByteLevel without its regex)"
	if isNull(raw) {
		return fmt.Errorf("no pre_tokenizer: a byte-level BPE needs ByteLevel %s", supported)
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		t.prefixSpace = c.AddPrefixSpace
		t.pattern = PatternGPT2
		if c.UseRegex != nil && !*c.UseRegex {
			t.pattern = PatternNone
		}
	case "Sequence":
		if len(c.Pretokenizers) != 2 {
			return fmt.Errorf("pre_tokenizer Sequence of %d pre-tokenizers is not supported %s", len(c.Pretokenizers), supported)
		}
		var split, bl component
		if err := json.Unmarshal(c.Pretokenizers[0], &split); err != nil {
			return fmt.Errorf("pre_tokenizer: %w", err)
		}
		if err := json.Unmarshal(c.Pretokenizers[1], &bl); err != nil {
			return fmt.Errorf("pre_tokenizer: %w", err)
		}
		if split.Type != "Split" || bl.Type != "ByteLevel" {
			return fmt.Errorf("pre_tokenizer Sequence of %s and %s is not supported %s", split.Type, bl.Type, supported)
		}
		if bl.UseRegex == nil || *bl.UseRegex || bl.AddPrefixSpace {
			return fmt.Errorf("pre_tokenizer: ByteLevel after Split with use_regex or add_prefix_space is not supported %s", supported)
		}
		re, ok := split.Pattern["Regex"]
		if !ok || len(split.Pattern) != 1 {
			return fmt.Errorf("pre_tokenizer Split: only a Regex pattern is supported, not %v", keys(split.Pattern))
		}
		if split.Behavior != "Isolated" || split.Invert {
			return fmt.Errorf("pre_tokenizer Split: behavior %s (invert %v) is not supported (supported: Isolated)", split.Behavior, split.Invert)
		}
		if t.pattern = patternOf(re); t.pattern == "" {
			return fmt.Errorf("pre_tokenizer Split: pattern %q is not supported (supported: those of GPT-2, Llama 3 and cl100k_base, Qwen2, o200k_base)", clip(re, 200))
		}
	default:
		return fmt.Errorf("pre_tokenizer %s is not supported %s", c.Type, supported)
	}
	t.split = t.pattern.splitter()
	return nil
}

func keys(m map[string]string) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	return k
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func (t *Tokenizer) hfModel(m *hfModel, vocabText, mergesText string) error {
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("model %s is not supported (supported: BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("model BPE: dropout is not supported")
	case m.ByteFallback:
		return fmt.Errorf("model BPE: byte_fallback is not supported (a byte-level BPE has every byte in its vocab)")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("model BPE: continuing_subword_prefix is not supported")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("model BPE: end_of_word_suffix is not supported")
	}
	entries, err := scanVocab(vocabText)
	if err != nil {
		return err
	}
	vocab := make(map[string]int32, len(entries))
	for _, e := range entries {
		vocab[e.s] = e.id // a token listed twice: the later id, as a map would
		t.size = max(t.size, int(e.id)+1)
	}
	for b := range 256 {
		id, ok := vocab[string(byteToRune[b])]
		if !ok {
			return fmt.Errorf("model BPE: the vocab has no token for byte 0x%02x (%q): not a byte-level vocab", b, string(byteToRune[b]))
		}
		t.bytes[b] = id
	}
	// The merges' ids first, then a table of the right size.
	type merge struct{ a, b, m int32 }
	merges := make([]merge, 0, len(mergesText)/12) // GPT-2's take 12 bytes each, Llama 3's 14.6
	var ab []byte
	err = scanMerges(mergesText, func(i int, a, b string) error {
		ab = append(append(ab[:0], a...), b...)
		ia, oka := vocab[a]
		ib, okb := vocab[b]
		im, okm := vocab[string(ab)]
		if !oka || !okb || !okm {
			return fmt.Errorf("model BPE: merges[%d] (%q %q): a token not in the vocab", i, clip(a, 40), clip(b, 40))
		}
		merges = append(merges, merge{ia, ib, im})
		return nil
	})
	if err != nil {
		return err
	}
	t.pairs = newPairTable(len(merges), len(merges))
	for i, mg := range merges {
		// A pair listed twice takes its later rank, as tokenizers' HashMap does.
		t.pairs.set(mg.a, mg.b, uint32(i), mg.m)
	}
	// A piece that is a token is one lookup: with ignore_merges always
	// (that is what it means), otherwise where merging its bytes gives
	// that token anyway. The pieces' bytes are one allocation.
	raw := make([]byte, 0, len(vocabText)/2) // Llama 3's tokens are 43% of its vocab's text
	ends := make([]int, len(entries))
	for i, e := range entries {
		n := len(raw)
		var ok bool
		if raw, ok = appendUnmapped(raw, e.s); !ok || len(raw)-n < 2 {
			raw = raw[:n] // not a piece the map is asked for
		}
		ends[i] = len(raw)
	}
	all := string(raw)
	t.whole = make(map[string]int32, len(entries))
	var sc scratch
	dups := len(vocab) < len(entries)
	for i, e := range entries {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		p := all[start:ends[i]]
		if p == "" {
			continue
		}
		id := e.id
		if dups {
			id = vocab[e.s] // a token listed twice: its later id
		}
		if m.IgnoreMerges {
			t.whole[p] = id
			continue
		}
		if got := t.mergePiece(nil, p, &sc); len(got) == 1 && got[0] == id {
			t.whole[p] = id
		}
	}
	return nil
}

func (t *Tokenizer) hfAddedTokens(list []hfAdded) error {
	if len(list) > MaxAddedTokens {
		return fmt.Errorf("added_tokens: %d, over the limit of %d", len(list), MaxAddedTokens)
	}
	var toks, norm []addedToken
	for _, a := range list {
		what := fmt.Sprintf("added token %q", clip(a.Content, 40))
		switch {
		case a.Content == "":
			return fmt.Errorf("added token %d is empty", a.ID)
		case len(a.Content) > MaxTokenBytes:
			return fmt.Errorf("%s: %d bytes, over the limit of %d", what, len(a.Content), MaxTokenBytes)
		case a.ID < 0 || a.ID >= MaxVocab:
			return fmt.Errorf("%s: id %d outside 0..%d", what, a.ID, MaxVocab-1)
		case a.SingleWord:
			return fmt.Errorf("%s: single_word is not supported", what)
		case a.LStrip || a.RStrip:
			return fmt.Errorf("%s: lstrip and rstrip are not supported", what)
		}
		if normalized := a.Normalized == nil && !a.Special || a.Normalized != nil && *a.Normalized; normalized {
			// Matched in normalized text, so normalized itself, as tokenizers does.
			content := a.Content
			if t.nfc {
				content = nfcAsTokenizers(content)
			}
			norm = append(norm, addedToken{s: content, id: int32(a.ID)})
		} else {
			toks = append(toks, addedToken{s: a.Content, id: int32(a.ID)})
		}
		t.size = max(t.size, int(a.ID)+1)
	}
	t.added, t.addedNorm = newAddedTokens(toks), newAddedTokens(norm)
	return nil
}

func (t *Tokenizer) hfPostProcessor(raw json.RawMessage, depth int) error {
	const supported = "(supported: ByteLevel, TemplateProcessing, or a Sequence of them)"
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel": // offsets only
		return nil
	case "Sequence":
		if depth > 0 {
			return fmt.Errorf("post_processor: nested Sequence is not supported %s", supported)
		}
		for _, p := range c.Processors {
			if err := t.hfPostProcessor(p, depth+1); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		var bos, eos []int32
		seen := false
		for _, item := range c.Single {
			if _, ok := item["Sequence"]; ok && len(item) == 1 {
				if seen {
					return fmt.Errorf("post_processor TemplateProcessing: a single template with two sequences")
				}
				seen = true
				continue
			}
			var sp struct {
				ID string `json:"id"`
			}
			rawSp, ok := item["SpecialToken"]
			if !ok || len(item) != 1 || json.Unmarshal(rawSp, &sp) != nil {
				return fmt.Errorf("post_processor TemplateProcessing: single template item %v is not supported", keysRaw(item))
			}
			st, ok := c.SpecialTokens[sp.ID]
			if !ok {
				return fmt.Errorf("post_processor TemplateProcessing: special token %q is not in its special_tokens", clip(sp.ID, 40))
			}
			for _, id := range st.IDs {
				if id < 0 || id >= MaxVocab {
					return fmt.Errorf("post_processor TemplateProcessing: special token %q has id %d", clip(sp.ID, 40), id)
				}
				if seen {
					eos = append(eos, int32(id))
				} else {
					bos = append(bos, int32(id))
				}
				t.size = max(t.size, int(id)+1)
			}
		}
		if !seen {
			return fmt.Errorf("post_processor TemplateProcessing: the single template has no sequence")
		}
		if len(bos)+len(eos) > 16 {
			return fmt.Errorf("post_processor TemplateProcessing: %d special tokens around a sequence, over the limit of 16", len(bos)+len(eos))
		}
		t.bos, t.eos = append(t.bos, bos...), append(eos, t.eos...)
		return nil
	}
	return fmt.Errorf("post_processor %s is not supported %s", c.Type, supported)
}

func keysRaw(m map[string]json.RawMessage) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	return k
}
