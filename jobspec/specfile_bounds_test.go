package jobspec

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/internal/hostile"
)

// allocated is how many bytes f allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A pipeline spec whose aliases expand to ten million scalars, in a job
// file, a sweep file or a job's pipeline string, is refused before
// anything is expanded, with the line of its first alias.
func TestSpecFilesWithAliasesAreRefusedUnexpanded(t *testing.T) {
	bomb := hostile.PipelineSpecBomb(7)
	head := "id: j\ndataset: s3://b/p/\nbatch_size: 8\nepochs: 1\n"
	quoted, _ := json.Marshal(bomb)
	for _, tc := range []struct {
		name, doc string
		sweep     bool
		want      []string
	}{
		{name: "inline pipeline", doc: head + "pipeline:\n" + hostile.Indent(bomb, 2),
			want: []string{"line 10: yaml aliases are not allowed"}},
		{name: "pipeline as a string", doc: head + "pipeline: " + string(quoted) + "\n",
			want: []string{"line 5: pipeline: pipeline spec: yaml aliases are not allowed (line 5)"}},
		{name: "sweep", doc: head + "count: 2\npipeline:\n" + hostile.Indent(bomb, 2), sweep: true,
			want: []string{"reading sweep spec: yaml aliases are not allowed (line 11)"}},
	} {
		var err error
		n := allocated(func() {
			if tc.sweep {
				_, err = ParseSweep([]byte(tc.doc))
			} else {
				_, err = Parse([]byte(tc.doc))
			}
		})
		var got []string
		if tc.sweep {
			if err != nil {
				got = []string{err.Error()}
			}
		} else {
			got = problems(t, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: problems (-want +got):\n%s", tc.name, diff)
		}
		if n > 4<<20 {
			t.Errorf("%s: refusing a %d-byte bomb allocated %d bytes, want a few MiB at most", tc.name, len(tc.doc), n)
		}
	}
}

func TestSpecFilesOverTheSizeLimitAreRefused(t *testing.T) {
	doc := "id: j\ndataset: s3://b/p/\npipeline: imagenet-train\nbatch_size: 8\nepochs: 1\n# " + strings.Repeat("x", 2*MaxFileBytes) + "\n"
	want := []string{"job spec is 2.0 MiB, over the 1.0 MiB limit"}
	if diff := cmp.Diff(want, problems(t, func() error { _, err := Parse([]byte(doc)); return err }())); diff != "" {
		t.Errorf("job file problems (-want +got):\n%s", diff)
	}
	if _, err := ParseSweep([]byte(doc)); err == nil || err.Error() != "reading sweep spec: sweep spec is 2.0 MiB, over the 1.0 MiB limit" {
		t.Errorf("ParseSweep = %v", err)
	}
}

// A vocab file is the replicas' (within their --vocab-dir): submitting
// checks its name's form and reads nothing, here or anywhere.
func TestJobSpecVocabIsANameWithinTheReplicasVocabDirectory(t *testing.T) {
	head := "id: j\ndataset: s3://b/p/\nbatch_size: 8\nepochs: 1\npipeline:\n  ops:\n    - text\n"
	if _, err := Parse([]byte(head + "    - {op: wordpiece, vocab: bert-base-uncased.txt}\n")); err != nil {
		t.Errorf("a vocab file name: %v", err)
	}
	_, err := Parse([]byte(head + "    - {op: wordpiece, vocab: /etc/passwd}\n"))
	want := []string{`line 8: pipeline: ops[1] (wordpiece): vocab "/etc/passwd": want builtin or a file name within the replica's vocab directory (--vocab-dir), such as bert-base-uncased.txt`}
	if diff := cmp.Diff(want, problems(t, err)); diff != "" {
		t.Errorf("an absolute vocab path (-want +got):\n%s", diff)
	}
}

// A causal LM job: the lm-pretrain builtin checks without its tokenizer
// (the replicas' file), and a packing spec's problems are at their lines.
func TestJobSpecPackedPipeline(t *testing.T) {
	if _, err := Parse([]byte("id: j\ndataset: s3://b/p/\nbatch_size: 8\nepochs: 1\npipeline: lm-pretrain\n")); err != nil {
		t.Errorf("lm-pretrain: %v", err)
	}
	head := "id: j\ndataset: s3://b/p/\nbatch_size: 8\nepochs: 1\npipeline:\n  ops:\n    - text\n    - {op: bpe, tokenizer: tokenizer.json, mode: ids}\n"
	if _, err := Parse([]byte(head + "    - {op: pack, seq_len: 4096, tail: drop}\n")); err != nil {
		t.Errorf("a packing spec: %v", err)
	}
	// A row of 16,384 is 256 KiB: over a 64 KiB chunk cap.
	_, err := Parse([]byte(head + "    - {op: pack, seq_len: 16384}\nchunk_max_bytes: 65536\n"))
	want := []string{"line 10: chunk_max_bytes: 65536: a packed row of seq_len 16384 takes 262152 bytes; want at least 266248 (or a shorter seq_len)"}
	if diff := cmp.Diff(want, problems(t, err)); diff != "" {
		t.Errorf("a row over the chunk cap (-want +got):\n%s", diff)
	}
	_, err = Parse([]byte(head + "    - {op: pack, seq_len: 0}\n"))
	want = []string{"line 9: pipeline: ops[2] (pack): seq_len 0: want 2..262144"}
	if diff := cmp.Diff(want, problems(t, err)); diff != "" {
		t.Errorf("a bad seq_len (-want +got):\n%s", diff)
	}
}
