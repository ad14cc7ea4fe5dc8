package wire

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestValidateColumns(t *testing.T) {
	if err := ValidateColumns(map[string]string{"jpg": "image.bytes", "cls": "label", "seg.png": "mask"}); err != nil {
		t.Fatal(err)
	}
	many := map[string]string{}
	for i := range MaxColumns + 1 {
		many[fmt.Sprint("m", i)] = "c"
	}
	for name, c := range map[string]struct {
		cols map[string]string
		want string
	}{
		"too many":     {many, "17 columns: want at most 16"},
		"empty member": {map[string]string{"": "text"}, `member ""`},
		"slash":        {map[string]string{"a/b": "text"}, `member "a/b"`},
		"long member":  {map[string]string{strings.Repeat("m", 33): "text"}, "want 1-32 characters"},
		"no column":    {map[string]string{"txt": ""}, `column ""`},
		"control":      {map[string]string{"txt": "te\nxt"}, "printable"},
		"long column":  {map[string]string{"txt": strings.Repeat("c", 257)}, "want 1-256"},
		"empty part":   {map[string]string{"jpg": "image."}, "an empty part"},
	} {
		err := ValidateColumns(c.cols)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	task := ShardTask{Job: "j", Bucket: "b", Key: "k.parquet", Pipeline: "p", ChunkMaxBytes: 1 << 20, Columns: ColumnsOf(map[string]string{"txt": ".x"})}
	if err := task.Validate(); err == nil || !strings.Contains(err.Error(), "columns: member txt") {
		t.Errorf("task with bad columns: %v", err)
	}
	spec := JobSpec{ID: "j", Dataset: "s3://b/p/", Pipeline: "p", BatchSize: 1, Epochs: 1, Columns: map[string]string{"txt": ".x"}}.WithDefaults()
	if ps := spec.Problems(); len(ps) != 1 || ps[0].Field != "columns" {
		t.Errorf("spec problems %v, want one of columns", ps)
	}
	if got := (Job{Spec: spec, Bucket: "b", Shards: []string{"a.parquet"}}).Task(0, 0).Columns.Map(); got["txt"] != ".x" {
		t.Errorf("task columns %v: want the spec's", got)
	}
}

// TestColumnsInATask: a task stays comparable, and its columns go over
// the wire as an object, in member order, absent when there are none.
func TestColumnsInATask(t *testing.T) {
	a := ShardTask{Job: "j", Key: "k", Columns: ColumnsOf(map[string]string{"txt": "content", "cls": "y"})}
	b := a
	b.Columns = ColumnsOf(map[string]string{"cls": "y", "txt": "content"})
	if a != b {
		t.Fatal("the same mapping made twice: tasks differ")
	}
	data, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"columns":{"cls":"y","txt":"content"}`) {
		t.Fatalf("task JSON %s", data)
	}
	var back ShardTask
	if err := json.Unmarshal(data, &back); err != nil || back != a {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	none, _ := json.Marshal(ShardTask{Job: "j"})
	if strings.Contains(string(none), "columns") {
		t.Fatalf("a task without columns: %s", none)
	}
	many := map[string]string{}
	for i := range MaxColumns + 1 {
		many[fmt.Sprint("m", i)] = "c"
	}
	raw, _ := json.Marshal(map[string]any{"job": "j", "columns": many})
	if err := json.Unmarshal(raw, &back); err == nil || !strings.Contains(err.Error(), "17 columns") {
		t.Fatalf("17 columns decoded: %v", err)
	}
}
