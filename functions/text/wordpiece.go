package text

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
)

// WordPieceOptions tune a Tokenizer. Lowercase and StripAccents are
// independent: BERT's uncased models want both, cased models neither.
type WordPieceOptions struct {
	Lowercase    bool
	StripAccents bool
	// MaxCharsPerWord: a longer word (in characters, after splitting off
	// punctuation) becomes a single [UNK]. 0 means DefaultMaxCharsPerWord.
	MaxCharsPerWord int
}

// DefaultMaxCharsPerWord is Hugging Face BertTokenizer's default.
const DefaultMaxCharsPerWord = 100

// The special tokens every BERT vocab has.
const (
	PadToken  = "[PAD]"
	UnkToken  = "[UNK]"
	ClsToken  = "[CLS]"
	SepToken  = "[SEP]"
	MaskToken = "[MASK]"
)

// Tokenizer turns text into WordPiece ids. It is safe for concurrent use.
type Tokenizer struct {
	v                  *Vocab
	o                  WordPieceOptions
	pad, unk, cls, sep int32
	// ascii holds the id of each one-character ASCII word, -1 if absent.
	ascii   [utf8.RuneSelf]int32
	scratch sync.Pool // *scratch
}

type scratch struct {
	word []byte  // the word being collected, normalised
	key  []byte  // "##" + word, for continuation lookups
	toks []int32 // Encode's and Pack's tokens before framing
}

// NewTokenizer checks o and that v has [PAD], [UNK], [CLS] and [SEP].
func NewTokenizer(v *Vocab, o WordPieceOptions) (*Tokenizer, error) {
	if v == nil {
		return nil, errors.New("wordpiece tokenizer: no vocab")
	}
	if o.MaxCharsPerWord < 0 {
		return nil, fmt.Errorf("wordpiece tokenizer: max chars per word %d: want >= 1 (0 for the default %d)", o.MaxCharsPerWord, DefaultMaxCharsPerWord)
	}
	if o.MaxCharsPerWord == 0 {
		o.MaxCharsPerWord = DefaultMaxCharsPerWord
	}
	t := &Tokenizer{v: v, o: o}
	for _, s := range []struct {
		tok string
		id  *int32
	}{{PadToken, &t.pad}, {UnkToken, &t.unk}, {ClsToken, &t.cls}, {SepToken, &t.sep}} {
		id, ok := v.ID(s.tok)
		if !ok {
			return nil, fmt.Errorf("wordpiece tokenizer: vocab has no %s token", s.tok)
		}
		*s.id = id
	}
	for c := range t.ascii {
		t.ascii[c] = -1
		if id, ok := v.ID(string(rune(c))); ok {
			t.ascii[c] = id
		}
	}
	t.scratch.New = func() any { return &scratch{} }
	return t, nil
}

// Vocab is the tokenizer's vocab.
func (t *Tokenizer) Vocab() *Vocab { return t.v }

// Tokenize returns the ids of text's WordPiece tokens, without [CLS] or
// [SEP].
func (t *Tokenizer) Tokenize(text string) []int32 {
	return t.AppendTokens(nil, text)
}

// flush WordPieces the collected word, if any, and empties it.
func (t *Tokenizer) flush(dst []int32, w []byte, s *scratch) ([]int32, []byte) {
	if len(w) == 0 {
		return dst, w
	}
	return t.wordPiece(dst, w, s), w[:0]
}

// char appends the id of a one-character word.
func (t *Tokenizer) char(dst []int32, r rune, s *scratch) []int32 {
	s.key = utf8.AppendRune(s.key[:0], r)
	if id, ok := t.v.ids[string(s.key)]; ok {
		return append(dst, id)
	}
	return append(dst, t.unk)
}

// wordPiece splits one normalised word greedily, longest match first, and
// appends its pieces' ids, or [UNK] when some part matches nothing.
func (t *Tokenizer) wordPiece(dst []int32, w []byte, s *scratch) []int32 {
	if utf8.RuneCount(w) > t.o.MaxCharsPerWord {
		return append(dst, t.unk)
	}
	if id, ok := t.v.ids[string(w)]; ok { // most words are whole tokens
		return append(dst, id)
	}
	// key is "##" + w; before looking up a piece starting at w[start], the
	// two bytes in front of it are overwritten with "##", so key[start:]
	// reads "##" + w[start:] without copying per piece.
	s.key = append(append(s.key[:0], "##"...), w...)
	key := s.key
	mark := len(dst)
	for start := 0; start < len(w); {
		prefix := 0
		if start > 0 {
			prefix = 2
			key[start], key[start+1] = '#', '#'
		}
		end := len(w)
		if limit := start + t.v.maxLen - prefix; end > limit {
			// No token is longer than maxLen bytes: skip hopeless lookups.
			end = max(limit, start)
			for end > start && !utf8.RuneStart(w[end]) {
				end--
			}
		}
		found := false
		for end > start {
			var piece []byte
			if prefix == 0 {
				piece = w[:end]
			} else {
				piece = key[start : end+2]
			}
			if id, ok := t.v.ids[string(piece)]; ok {
				dst = append(dst, id)
				found = true
				break
			}
			end--
			for end > start && !utf8.RuneStart(w[end]) {
				end--
			}
		}
		if !found {
			return append(dst[:mark], t.unk)
		}
		start = end
	}
	return dst
}
