package text

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Vocab maps WordPiece tokens to ids: the id of a token is its line number
// (from 0) in the vocab file.
type Vocab struct {
	ids    map[string]int32
	tokens []string
	// maxLen is the longest token in bytes: no longer substring can match.
	maxLen int
}

// LoadVocab reads a vocab file: one token per line, "\n" or "\r\n"
// endings. An empty line or a token seen before is an error naming its
// line (1-based): either would shift every id after it.
func LoadVocab(r io.Reader) (*Vocab, error) {
	v := &Vocab{ids: map[string]int32{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		tok := strings.TrimSuffix(sc.Text(), "\r")
		if tok == "" {
			return nil, fmt.Errorf("vocab line %d: empty token", line)
		}
		if first, ok := v.ids[tok]; ok {
			return nil, fmt.Errorf("vocab line %d: duplicate token %q (first on line %d)", line, tok, first+1)
		}
		if len(v.tokens) >= 1<<31-1 {
			return nil, fmt.Errorf("vocab line %d: too many tokens for int32 ids", line)
		}
		v.ids[tok] = int32(len(v.tokens))
		v.tokens = append(v.tokens, tok)
		v.maxLen = max(v.maxLen, len(tok))
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("vocab line %d: longer than 1 MiB", len(v.tokens)+1)
		}
		return nil, fmt.Errorf("reading vocab: %w", err)
	}
	if len(v.tokens) == 0 {
		return nil, errors.New("vocab is empty")
	}
	return v, nil
}

// ID returns the id of tok and whether the vocab has it.
func (v *Vocab) ID(tok string) (int32, bool) {
	id, ok := v.ids[tok]
	return id, ok
}

// Token returns the token with id, and whether there is one.
func (v *Vocab) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(v.tokens) {
		return "", false
	}
	return v.tokens[id], true
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return len(v.tokens) }

//go:embed vocab/builtin.txt
var builtinVocab string

// BuiltinVocab returns the embedded English vocab (vocab/builtin.txt, made
// by vocab/generate.py): [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4,
// ASCII punctuation, digits and letters with their "##" continuations (so
// ASCII text never needs [UNK]), common English endings as "##" pieces,
// and about 4,250 common English words. Each call parses a fresh copy.
func BuiltinVocab() *Vocab {
	v, err := LoadVocab(strings.NewReader(builtinVocab))
	if err != nil {
		panic("text: embedded vocab is broken: " + err.Error()) // a build defect, caught by the tests
	}
	return v
}
