package pipeline

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sluice-project/sluice/functions/text"
	"github.com/sluice-project/sluice/internal/bytesize"
)

// builtinVocab is the vocab name of the embedded English vocab.
const builtinVocab = "builtin"

// MaxVocabBytes caps a vocab file: BERT's is 230 KB, multilingual ones a
// few MB.
const MaxVocabBytes = 16 << 20

// loadVocab reads the vocab a wordpiece op names: builtin, or a file
// within o.VocabDir. The name comes from a job's spec, and every replica
// loads it, so it is only ever a file name within that directory (never
// absolute, never climbing out with .., never through a symlink that
// leads out: os.Root), and no error says anything about what lies
// outside it. With o.check, the name is checked and nothing is read (nil
// vocab).
func loadVocab(name string, o Options) (*text.Vocab, error) {
	if name == builtinVocab {
		return text.BuiltinVocab(), nil
	}
	if !filepath.IsLocal(name) {
		return nil, fmt.Errorf("vocab %q: want builtin or a file name within the replica's vocab directory (--vocab-dir), such as bert-base-uncased.txt", name)
	}
	if o.check {
		return nil, nil
	}
	f, err := openVocabFile("vocab", name, o, MaxVocabBytes)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := text.LoadVocab(io.LimitReader(f, MaxVocabBytes))
	if err != nil {
		return nil, fmt.Errorf("vocab %q: %w", name, err)
	}
	return v, nil
}

// openVocabFile opens name within o.VocabDir for what (an op's parameter,
// "vocab" or "tokenizer"), a regular file of at most limit bytes; the
// caller checked that name is local. What an error says of a name is the
// same whether or not something lies outside the directory.
func openVocabFile(what, name string, o Options, limit int64) (*os.File, error) {
	if o.VocabDir == "" {
		return nil, fmt.Errorf("%s %q: no vocab directory is set (--vocab-dir), so only builtin is read", what, name)
	}
	root, err := os.OpenRoot(o.VocabDir)
	if err != nil {
		return nil, fmt.Errorf("%s %q: the replica's vocab directory cannot be opened", what, name)
	}
	defer root.Close()
	f, err := root.Open(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s %q: no such file in the vocab directory", what, name)
	case err != nil: // a symlink out of the directory among them: say nothing of its target
		return nil, fmt.Errorf("%s %q: not a readable file within the vocab directory", what, name)
	}
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s %q: not a regular file", what, name)
	}
	if info.Size() > limit {
		f.Close()
		return nil, fmt.Errorf("%s %q is %s, over the %s limit", what, name, bytesize.Format(info.Size()), bytesize.Format(limit))
	}
	return f, nil
}
