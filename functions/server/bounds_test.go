package server

import (
	"net/http"
	"runtime"
	"slices"
	"testing"

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
