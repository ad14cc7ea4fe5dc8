package server

import (
	"net/http"
	"runtime"
	"testing"

	"github.com/sluice-project/sluice/internal/hostile"
	"github.com/sluice-project/sluice/internal/testenv"
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
