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
	if o.VocabDir == "" {
		return nil, fmt.Errorf("vocab %q: no vocab directory is set (--vocab-dir), so only builtin is read", name)
	}
	root, err := os.OpenRoot(o.VocabDir)
	if err != nil {
		return nil, fmt.Errorf("vocab %q: the replica's vocab directory cannot be opened", name)
	}
	defer root.Close()
	f, err := root.Open(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("vocab %q: no such file in the vocab directory", name)
	case err != nil: // a symlink out of the directory among them: say nothing of its target
		return nil, fmt.Errorf("vocab %q: not a readable file within the vocab directory", name)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return nil, fmt.Errorf("vocab %q: not a regular file", name)
	}
	if info.Size() > MaxVocabBytes {
		return nil, fmt.Errorf("vocab %q is %s, over the %s limit", name, bytesize.Format(info.Size()), bytesize.Format(MaxVocabBytes))
	}
	v, err := text.LoadVocab(io.LimitReader(f, MaxVocabBytes))
	if err != nil {
		return nil, fmt.Errorf("vocab %q: %w", name, err)
	}
	return v, nil
}
