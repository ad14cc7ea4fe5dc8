package layout

import (
	"strings"
	"testing"
)

// top are the floors above the product: the one binary, the load tests,
// the benchmarks and the test tree. They compose product packages; no
// product package imports them.
var top = []string{"cmd/", "loadtest/", "bench/", "test/"}

func isTop(rel string) bool {
	for _, p := range top {
		if strings.HasPrefix(rel+"/", p) {
			return true
		}
	}
	return false
}

// TestNoUpwardImports: no product package (outside its tests) imports
// the commands, the load tests, the benchmarks or the test tree.
func TestNoUpwardImports(t *testing.T) {
	product := 0
	for _, p := range listImports(t, "./...") {
		if isTop(p.pkg) {
			continue
		}
		product++
		for _, imp := range p.imports {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok && isTop(rel) {
				t.Errorf("%s imports %s: product packages do not import the floors that compose them", p.pkg, rel)
			}
		}
	}
	if product < 20 {
		t.Fatalf("go list gave %d product packages", product)
	}
}
