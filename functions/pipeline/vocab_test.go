package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func wordpieceSpec(vocab string) string {
	return "ops:\n  - text\n  - {op: wordpiece, vocab: " + vocab + "}\n"
}

// vocabErr is the problem building a wordpiece pipeline on vocab reports.
func vocabErr(t *testing.T, vocab string, o Options) string {
	t.Helper()
	_, err := Lookup(wordpieceSpec(vocab), o)
	if err == nil {
		return ""
	}
	probs := problems(t, err)
	if len(probs) != 1 {
		t.Fatalf("vocab %s: problems %q, want one", vocab, probs)
	}
	return strings.TrimPrefix(probs[0], "line 3: ops[1] (wordpiece): ")
}

// A job's spec could name any local file as its vocab: every replica
// opened it, and the error said whether it existed and quoted its
// duplicate lines. Now a replica with no vocab directory reads no vocab
// file, and the answer for a file outside its directory is the same
// whether it exists or not, and quotes nothing.
func TestVocabOutsideTheVocabDirectoryTellsNothing(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secrets.txt")
	if err := os.WriteFile(secret, []byte("[PAD]\nhunter2\nhunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(outside, "missing.txt")
	for _, o := range []Options{{}, {VocabDir: t.TempDir()}} {
		got := vocabErr(t, secret, o)
		if strings.Contains(got, "hunter2") || strings.Contains(got, "duplicate") {
			t.Errorf("VocabDir %q: a file outside it: %q quotes it", o.VocabDir, got)
		}
		if other := vocabErr(t, missing, o); strings.ReplaceAll(other, missing, secret) != got {
			t.Errorf("VocabDir %q: an existing file outside it gives %q, a missing one %q: want the same", o.VocabDir, got, other)
		}
		if want := `vocab "` + secret + `": want builtin or a file name within the replica's vocab directory (--vocab-dir), such as bert-base-uncased.txt`; got != want {
			t.Errorf("VocabDir %q: %q, want %q", o.VocabDir, got, want)
		}
	}
}

func TestVocabWithinTheVocabDirectory(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "bert.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
	write(filepath.Join(dir, "dup.txt"), "[PAD]\nhello\nhello\n")
	write(filepath.Join(outside, "secrets.txt"), "[PAD]\nhunter2\nhunter2\n")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(dir, "sub", "v.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
	for name, target := range map[string]string{
		"out.txt":     filepath.Join(outside, "secrets.txt"),
		"nowhere.txt": filepath.Join(outside, "missing.txt"),
		"up.txt":      "../" + filepath.Base(outside) + "/secrets.txt",
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	big := filepath.Join(dir, "big.txt")
	write(big, "")
	if err := os.Truncate(big, MaxVocabBytes+1<<20); err != nil {
		t.Fatal(err)
	}
	o := Options{VocabDir: dir}
	for vocab, want := range map[string]string{
		"builtin":     "",
		"bert.txt":    "",
		"sub/v.txt":   "",
		"none.txt":    `vocab "none.txt": no such file in the vocab directory`,
		"dup.txt":     `vocab "dup.txt": vocab line 3: duplicate token "hello" (first on line 2)`, // within the directory: said
		"sub":         `vocab "sub": not a regular file`,
		"big.txt":     `vocab "big.txt" is 17.0 MiB, over the 16.0 MiB limit`,
		"out.txt":     `vocab "out.txt": not a readable file within the vocab directory`, // a symlink out: target not told
		"nowhere.txt": `vocab "nowhere.txt": not a readable file within the vocab directory`,
		"up.txt":      `vocab "up.txt": not a readable file within the vocab directory`,
		"../x.txt":    `vocab "../x.txt": want builtin or a file name within the replica's vocab directory (--vocab-dir), such as bert-base-uncased.txt`,
	} {
		if got := vocabErr(t, vocab, o); got != want {
			t.Errorf("vocab %s: %q, want %q", vocab, got, want)
		}
	}
	if got, want := vocabErr(t, "bert.txt", Options{}), `vocab "bert.txt": no vocab directory is set (--vocab-dir), so only builtin is read`; got != want {
		t.Errorf("no vocab directory: %q, want %q", got, want)
	}
}

// Check (job submit) checks a vocab name's form and reads nothing: the
// file is the replicas'.
func TestCheckReadsNoVocabFile(t *testing.T) {
	if err := Check(wordpieceSpec("bert-base-uncased.txt")); err != nil {
		t.Errorf("Check with a vocab file name: %v", err)
	}
	if err := Check(wordpieceSpec("/etc/passwd")); err == nil || !strings.Contains(err.Error(), "want builtin or a file name within") {
		t.Errorf("Check with an absolute vocab path: %v", err)
	}
	if err := Check("imagenet-train"); err != nil {
		t.Errorf("Check(imagenet-train): %v", err)
	}
}
