package hostile

import (
	"testing"

	"gopkg.in/yaml.v3"
)

func TestPipelineSpecBombIsSmallAndExpandsTenfold(t *testing.T) {
	doc := PipelineSpecBomb(7)
	if len(doc) > 500 {
		t.Fatalf("bomb is %d bytes, want a few hundred", len(doc))
	}
	var v struct {
		Ops []map[string]any `yaml:"ops"`
	}
	if err := yaml.Unmarshal([]byte(PipelineSpecBomb(3)), &v); err != nil {
		t.Fatal(err)
	}
	a2 := v.Ops[0]["a2"].([]any)
	if len(a2) != 10 || len(a2[0].([]any)) != 10 {
		t.Fatalf("a2 = %v, want 10 x 10 x 10", a2)
	}
}
