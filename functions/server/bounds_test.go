package server

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/internal/hostile"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// A task whose pipeline spec is a YAML alias bomb (400 bytes naming ten
// million scalars) once made a replica take 471 MB before it answered
// 400: it is refused with the cause named, without expanding anything.
func TestTaskWithAYAMLAliasBombIsRefusedNamingTheCause(t *testing.T) {
	s3c, _ := testenv.S3(t, bucket)
	_, _, url := serve(t, Config{}, s3c)
	tk := task(0)
	tk.Pipeline = hostile.PipelineSpecBomb(7)
	ev := taskEvent(t, tk)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp := post(t, url, ev)
	runtime.ReadMemStats(&after)
	expectStatus(t, resp, http.StatusBadRequest, "pipeline spec: yaml aliases are not allowed (line 5)")
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Fatalf("answering the task allocated %d bytes, want a few MiB at most", got)
	}
}

// A tar sample of sparse members (12 x 60 MiB in 25 KB) is reported as a
// failed sample with the reason, and the shard's other samples go through.
func TestSparseTarSampleFailsAloneInTheShardEnd(t *testing.T) {
	e := setup(t, Config{})
	good := e.shards[0].Data
	bomb := hostile.SparseTar("zz-sparse", 12, 60<<20, false)
	putObject(t, e, "train/sparse.tar", append(slices.Clone(good[:len(good)-1024]), bomb...))
	tk := task(0)
	tk.Key = "train/sparse.tar"
	out := complete(t, post(t, e.url, taskEvent(t, tk)))
	keys, _ := samplesOf(t, e.shards[0])
	if got, want := out.end.Samples+out.end.FailedCount(), len(keys)+1; got != want {
		t.Errorf("%d samples done or failed, want the shard's %d and the sparse one", got, want-1)
	}
	i := slices.IndexFunc(out.end.Failed, func(f wire.FailedSample) bool { return f.Key == "zz-sparse" })
	if i < 0 || out.end.Failed[i].Reason != "member zz-sparse.m0 is a sparse file (GNU sparse header): a corrupt sample" {
		t.Fatalf("failed samples %+v: want zz-sparse with its reason", out.end.Failed)
	}
}

// The decode budget is the replica's, sized from its memory limit: a
// 16-bit PNG whose decoding alone is over it fails its sample, naming its
// size, and the shard goes on.
func TestImageOverTheReplicasDecodeBudgetFailsAlone(t *testing.T) {
	e := setup(t, Config{MemoryLimit: 64 << 20})
	var b bytes.Buffer
	w := wds.NewWriter(&b)
	for i, data := range [][]byte{hostile.PNG16(2000, 2000), hostile.PNG16(300, 200)} {
		if err := w.Write(wds.Sample{Key: fmt.Sprint(i), Files: map[string][]byte{"png": data, "cls": []byte("1")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	putObject(t, e, "train/png16.tar", b.Bytes())
	tk := task(0)
	tk.Key = "train/png16.tar"
	out := complete(t, post(t, e.url, taskEvent(t, tk)))
	want := []wire.FailedSample{{Key: "0", Reason: "member png: 2000x2000 image: decoding takes 42.0 MiB, over the 32.0 MiB decode budget"}}
	if out.end.Samples != 1 || !slices.Equal(out.end.Failed, want) {
		t.Fatalf("%d samples, failed %+v; want 1, and %+v", out.end.Samples, out.end.Failed, want)
	}
}

// The shard cache's memory tier comes out of the memory limit before the
// decode budget takes its share of the rest.
func TestDecodeBudgetLeavesTheCachesMemory(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		limit, cache, want int64
	}{
		{limit: 2 << 30, want: 1 << 30},
		{limit: 2 << 30, cache: 512 << 20, want: 768 << 20},
		{limit: 2 << 30, cache: 2 << 30, want: 256 << 20}, // misconfigured: a quarter of the limit is decoding's
	} {
		cfg := Config{MemoryLimit: tc.limit}
		cfg.Cache.MemoryBytes = tc.cache
		if got := decodeBudget(cfg, log).Total(); got != tc.want {
			t.Errorf("limit %d, cache memory %d: budget %d, want %d", tc.limit, tc.cache, got, tc.want)
		}
	}
}

// A task's pipeline may name a vocab file only within the replica's
// vocab directory; what it names outside is refused the same way whether
// it exists or not, and nothing of it is quoted.
func TestTaskVocabOnlyFromTheVocabDirectory(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secrets.txt")
	if err := os.WriteFile(secret, []byte("[PAD]\nhunter2\nhunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(secret, filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	s3c, _ := testenv.S3(t, bucket)
	for _, tc := range []struct {
		cfg         Config
		vocab, want string
	}{
		{Config{}, secret, `vocab "` + secret + `": want builtin or a file name within the replica's vocab directory`},
		{Config{}, "secrets.txt", `vocab "secrets.txt": no vocab directory is set (--vocab-dir), so only builtin is read`},
		{Config{VocabDir: dir}, "link.txt", `vocab "link.txt": not a readable file within the vocab directory`},
	} {
		_, _, url := serve(t, tc.cfg, s3c)
		tk := task(0)
		tk.Pipeline = "ops:\n  - text\n  - {op: wordpiece, vocab: " + tc.vocab + "}\n"
		resp := post(t, url, taskEvent(t, tk))
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tc.want) || strings.Contains(string(body), "hunter2") {
			t.Errorf("vocab %s: status %d %q; want 400 with %q", tc.vocab, resp.StatusCode, body, tc.want)
		}
	}
}
