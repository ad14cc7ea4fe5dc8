package server

import "testing"

func TestPipelineCacheBuildsEachPipelineOnce(t *testing.T) {
	var c pipelineCache
	a, err := c.get("imagenet-train", false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.get("imagenet-train", false)
	if a != b {
		t.Error("the same pipeline name was built twice")
	}
	if _, err := c.get("no-such-pipeline", false); err == nil {
		t.Fatal("an unknown pipeline: want an error")
	}
	if len(c.m) != 1 {
		t.Errorf("cache holds %d pipelines, want 1 (errors are not cached)", len(c.m))
	}
	for i := 0; i < maxCachedPipelines+5; i++ {
		doc := `{"ops": [{"op": "decode"}, {"op": "center_crop", "size": ` + string(rune('1'+i%9)) + `}, {"op": "to_uint8_hwc"}], "name": "n` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `"}`
		if _, err := c.get(doc, false); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.m) > maxCachedPipelines {
		t.Errorf("cache holds %d pipelines, over its bound %d", len(c.m), maxCachedPipelines)
	}
}
