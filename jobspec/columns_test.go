package jobspec

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseColumns(t *testing.T) {
	doc := `id: j
dataset: s3://b/hf/
pipeline: imagenet-train
batch_size: 8
epochs: 1
columns: {jpg: img.bytes, cls: fine_label}
`
	got, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"jpg": "img.bytes", "cls": "fine_label"}, got.Columns); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	for bad, want := range map[string]string{
		"columns: [a, b]":         "line 6: columns: a list: want a mapping of sample members to column names",
		"columns: {jpg: [a]}":     "line 6: columns: jpg: a list: want a string",
		"columns: {'j/p': image}": `line 6: columns: member "j/p": want 1-32 characters of [A-Za-z0-9_.-]`,
		"columns: {txt: 'a..b'}":  `line 6: columns: member txt: column "a..b": an empty part`,
	} {
		_, err := Parse([]byte(strings.Replace(doc, "columns: {jpg: img.bytes, cls: fine_label}", bad, 1)))
		if ps := problems(t, err); len(ps) != 1 || !strings.Contains(ps[0], want) {
			t.Errorf("%s: problems %q, want one with %q", bad, ps, want)
		}
	}
}
